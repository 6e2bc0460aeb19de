"""A CSV table read with clear errors: its header and numbered rows (:func:`read_csv_records`), and the
columns a loader needs (:func:`require_columns`).  Used by :mod:`llama_index_carag.datasets`."""

from __future__ import annotations

import csv
import io
from pathlib import Path

__all__ = ["read_csv_records", "require_columns"]


def read_csv_records(path: Path, encoding: str) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header (names stripped) and ``(line, row)`` of every data row of the CSV file ``path``, NULs removed.

    Raises:
        ValueError: a directory, undecodable bytes or a malformed CSV, with where and what to do.
    """
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory, not a CSV file.") from None
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path} is not valid {encoding} text (byte {exc.start}: {raw[exc.start : exc.start + 4]!r}); "
            "re-save it as UTF-8 or pass encoding=..."
        ) from None
    text = text.replace("\x00", "")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        fieldnames = [f.strip() for f in (reader.fieldnames or [])]
    except csv.Error as exc:
        raise ValueError(f"{path} is not a readable CSV file ({exc}).") from None
    reader.fieldnames = fieldnames
    records: list[tuple[int, dict[str, str]]] = []
    try:
        for row in reader:
            records.append((reader.line_num, row))
    except csv.Error as exc:
        raise ValueError(f"{path}: malformed CSV near line {reader.line_num} ({exc}).") from None
    return fieldnames, records


def require_columns(fieldnames: list[str], needed: dict[str, str | None], source: str) -> None:
    """Raise ``ValueError`` naming the columns of ``needed`` (option -> column, ``None``: not asked) ``source`` lacks."""
    missing = [col for col in needed.values() if col and col not in fieldnames]
    if missing:
        have = ", ".join(fieldnames) if fieldnames else "no header"
        raise ValueError(f"{source} lacks column(s) {', '.join(missing)} (it has: {have}).")
