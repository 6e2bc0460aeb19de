"""The files of ``carag check --claims``: the claims read in, the results appended out (and resumed).

Claims (:func:`read_claims`): ``.txt`` one claim per line (``-``: stdin, as text), ``.csv`` with a claim
column (``--claim-col``; default the first of ``claim``, ``Claim_text``, ``text``), ``.jsonl`` one object
per line with a ``"claim"`` field (and an optional ``"id"``).  Each claim is numbered by its line (``.txt``,
``.jsonl``) or data row (``.csv``, header excluded).

Results (:class:`ResultsFile`): one JSON record per line, each written, flushed and ``fsync``-ed as soon as
its claim is checked, so a kill loses at most the claim in flight.  A rerun with the same file reads the
records there, drops a truncated last line (a kill mid-write; from the first unreadable line on, if one
were ever damaged) and skips every claim already done (same
line number AND same claim text).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import sys
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from llama_index_carag.cli.common import CLIError
from llama_index_carag.verdicts.batch import BatchClaim, is_error

logger = logging.getLogger(__name__)

__all__ = ["CLAIM_COLUMNS", "ResultsFile", "read_claims"]

#: Default claim columns of a ``.csv``, the first present is used.
CLAIM_COLUMNS = ("claim", "Claim_text", "text")

#: ``(line number, why)`` of an input line that holds no claim.
Problem = tuple[int, str]


def _txt(text: str) -> tuple[list[BatchClaim], list[Problem]]:
    return [BatchClaim(n, line.rstrip("\r")) for n, line in enumerate(text.split("\n"), start=1) if line.strip()], []


def _jsonl(text: str) -> tuple[list[BatchClaim], list[Problem]]:
    claims: list[BatchClaim] = []
    problems: list[Problem] = []
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append((n, f"not JSON ({exc.msg})"))
            continue
        if not isinstance(obj, dict) or "claim" not in obj:
            problems.append((n, 'no "claim" field'))
            continue
        claims.append(BatchClaim(n, obj["claim"], obj.get("id")))
    return claims, problems


def _csv(text: str, column: str | None) -> tuple[list[BatchClaim], list[Problem]]:
    reader = csv.DictReader(io.StringIO(text))
    fields = list(reader.fieldnames or [])
    name = column or next((c for c in CLAIM_COLUMNS if c in fields), None)
    if name is None or name not in fields:
        wanted = repr(column) if column else "one of " + ", ".join(CLAIM_COLUMNS)
        raise CLIError(
            f"the CSV has no claim column {wanted} (its columns: {', '.join(fields) or 'none'}); use --claim-col"
        )
    return [BatchClaim(n, row.get(name) or "") for n, row in enumerate(reader, start=1)], []


def read_claims(path: str, claim_col: str | None = None) -> tuple[list[BatchClaim], list[Problem]]:
    """The claims of ``path`` (``-``: stdin, one per line) and the lines that hold none (line, why).

    Blank ``.txt``/``.jsonl`` lines are not claims and are not reported.

    Raises:
        CLIError: an unknown extension, or a ``.csv`` without the claim column.
    """
    if path == "-":
        return _txt(sys.stdin.read())
    suffix = Path(path).suffix.lower()
    if suffix not in (".txt", ".csv", ".jsonl"):
        raise CLIError(f"--claims: {path} is not a .txt, .csv or .jsonl file")
    text = Path(path).read_text(encoding="utf-8-sig")
    if suffix == ".csv":
        return _csv(text, claim_col)
    return _jsonl(text) if suffix == ".jsonl" else _txt(text)


def _done_records(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The complete records at the start of ``data`` and the byte length they take (where to cut)."""
    records: list[dict[str, Any]] = []
    end = 0
    for raw in data.split(b"\n")[:-1]:  # the part after the last newline was never finished
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            break
        if not isinstance(record, dict):
            break
        records.append(record)
        end += len(raw) + 1
    return records, end


class ResultsFile:
    """The ``--out`` JSONL of a batch: the records already there, then each new one appended durably.

    Args:
        path: the results file (created if missing).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        data = self.path.read_bytes() if self.path.exists() else b""
        self.records, self._end = _done_records(data)
        self.dropped = len(data) - self._end  # bytes of a truncated (or unreadable) tail
        self._done = {(r.get("line"), r.get("claim")) for r in self.records if not is_error(r)}
        self._fh: IO[bytes] | None = None

    def done(self, item: BatchClaim) -> bool:
        """Whether ``item`` has a result in the file already (same line number and claim text)."""
        return (item.line, item.claim) in self._done

    def __enter__(self) -> ResultsFile:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "r+b" if self.path.exists() else "w+b")
        if self.dropped:
            logger.warning("%s: dropped a truncated last record (%d bytes)", self.path, self.dropped)
        self._fh.truncate(self._end)
        self._fh.seek(0, os.SEEK_END)
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def append(self, record: dict[str, Any]) -> None:
        """Write ``record`` as one line, flushed and synced to disk before returning."""
        if self._fh is None:
            raise RuntimeError("ResultsFile.append outside its with-block")
        self._fh.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        if not is_error(record):
            self._done.add((record.get("line"), record.get("claim")))
