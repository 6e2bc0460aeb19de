"""``carag check``, ``carag chat`` and ``carag graph``: one check of a claim against an index and how it is printed,
or a file of claims checked into a results JSONL (``--claims FILE --out results.jsonl``: resumable, one model
load); the check's SOI graph (HTML, PNG) and its cluster's graph (PNG).

The files of ``carag check --claims``: claims (:func:`read_claims`) from ``.txt`` (one per line; ``-``: stdin),
``.csv`` (a claim column: ``--claim-col``, default the first of :data:`CLAIM_COLUMNS`) or ``.jsonl`` (a ``"claim"``
field and an optional ``"id"``), each numbered by its line or data row; results (:class:`ResultsFile`) one JSON
record per line, each written, flushed and ``fsync``-ed as soon as its claim is checked, so a kill loses at most
the claim in flight.  A rerun with the same file drops a truncated last line and skips every claim already done
(same line number and same claim text).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import os
import sys
import textwrap
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from llama_index_carag.cli.common import CLIError, Stages, _load_retriever, _stages, retriever_and_llm
from llama_index_carag.verdicts.bulk import BatchClaim, is_error
from llama_index_carag.verdicts.excerpts import shown_passage

logger = logging.getLogger(__name__)


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


_SOI_SHORT = {
    "annotated_evidences": "annotated",
    "related_claims": "related",
    "thematic_cluster_evidences": "thematic",
    "refined_cluster_evidences": "refined",
}


#: Below this many characters for the text column, a passage's text goes on its own lines under its row.
_MIN_TEXT_COLUMN = 60


def _print_evidence(rows: list[dict[str, Any]]) -> None:
    import shutil

    width = max(80, shutil.get_terminal_size((120, 24)).columns)
    id_width = min(40, max([len(r["id"]) for r in rows] + [2]))
    text_width = width - 52 - id_width
    below = text_width < _MIN_TEXT_COLUMN
    header = f"{'#':>2} {'score':>6} {'clu':>3} {'sim(q)':>6} {'sim(T)':>6} {'in SOI':<9} {'stance':<13} id"
    print(header if below else f"{header:<{len(header) - 2 + id_width}} evidence")
    for row in rows:
        info = row["carag"]
        kind = _SOI_SHORT.get(info.get("soi_kind") or "", "-") if info.get("in_soi") else "-"
        text = shown_passage(row["text"], row.get("stance_excerpt"))
        line = (
            f"{row['rank']:>2} {_fmt(row['score']):>6} {info.get('cluster')!s:>3} {_fmt(info.get('claim_similarity')):>6} "
            f"{_fmt(info.get('thematic_similarity')):>6} {kind:<9} {_stance(row):<13} "
            f"{textwrap.shorten(row['id'], id_width, placeholder='…'):<{id_width}}"
        )
        if below:
            print(line.rstrip())
            wrapped = textwrap.wrap(textwrap.shorten(text, 2 * (width - 6)), width - 6)
            print("\n".join("     " + part for part in wrapped[:2]))
        else:
            print(f"{line} {textwrap.shorten(text, width=text_width)}")


#: How a passage's stance is shown in the table.
_STANCE_SHORT = {"SUPPORTED": "supports", "REFUTED": "refutes", "NOT_ENOUGH_INFO": "neither"}


def _stance(row: dict[str, Any]) -> str:
    """``"S .91 R .03 N .06"`` (the verifier's three probabilities) or ``"supports 0.91"`` / ``"refutes 0.64"`` /
    ``"neither 0.55"``; ``"-"`` when no stance was computed."""
    stance = row.get("stance")
    if not stance:
        return "-"
    probs = row.get("stance_probabilities")
    if probs:  # the verifier's three probabilities: "S .91 R .03 N .06"
        return " ".join(f"{k[0]} {float(probs.get(k, 0.0)):.2f}".replace("0.", ".") for k in _STANCE_SHORT)
    score = row.get("stance_score")
    return _STANCE_SHORT.get(stance, stance.lower()) + ("" if score is None else f" {score:.2f}")


def retriever_and_verdict_llm(args: argparse.Namespace, stages: Stages) -> tuple[Any, Any | None]:
    """The retriever of ``--index`` and the LLM ``carag check`` needs: none with ``--no-llm`` (retrieval only); a
    stand-in that is never called with ``--no-explanation`` under the verifier (nothing is loaded); else ``--llm``'s,
    loaded beside the retriever (:func:`~llama_index_carag.cli.common.retriever_and_llm`)."""
    verifier = getattr(args, "decision", "verifier") == "verifier"
    if not args.no_llm and args.no_explanation and verifier:
        from llama_index.core.llms import MockLLM

        return _load_retriever(args, stages), MockLLM()
    return retriever_and_llm(args, stages, load_llm=not args.no_llm, hold_opening=verifier)


def _index_checker(
    index_dir: str, retriever: Any, llm: Any | None, explain: bool = True, decision: str = "verifier"
) -> Any:
    """The checker with the index's own verifier (:func:`~llama_index_carag.verdicts.synthesizer.get_fact_check_synthesizer`
    with ``index=``); without an LLM, retrieval only."""
    from llama_index_carag.verdicts.check import ClaimChecker
    from llama_index_carag.verdicts.synthesizer import get_fact_check_synthesizer

    if llm is None:
        return ClaimChecker(retriever, None)
    return ClaimChecker(retriever, get_fact_check_synthesizer(llm, index=index_dir, explain=explain, decision=decision))


def _print_cited(verdict: dict[str, Any], evidence: list[dict[str, Any]]) -> None:
    """The passages the explanation cites, with their text, under the verdict."""
    numbers = verdict.get("cited_passages") or [
        row["rank"] for row in evidence if row["id"] in set(verdict.get("evidence_ids") or [])
    ]
    rows = {row["rank"]: row for row in evidence}
    for n in numbers:
        if n in rows:
            text = textwrap.shorten(shown_passage(rows[n]["text"], rows[n].get("stance_excerpt")), width=150)
            print(f"  cited [{n}] {rows[n]['id']}: {text}")
    if verdict.get("invalid_citations"):
        print(f"  (removed citations to passages that were not shown: {verdict['invalid_citations']})")


def _print_check(result: dict[str, Any]) -> None:
    from llama_index_carag.verdicts.types import confidence_words

    verdict, soi, s = result["verdict"], result["soi"], result["settings"]
    print(f"Claim: {result['claim']}")
    if verdict is not None:
        note = "" if verdict["parsed"] else "  (no label found in the model's answer)"
        sure = f" ({confidence_words(verdict['confidence'])})" if verdict.get("confidence") is not None else ""
        print(f"Verdict: {verdict['label']}{sure}{note}")
        print(f"Explanation: {verdict['explanation']}")
        if verdict.get("decision"):
            print(
                f"Decided by: {verdict['decision']}"
                + (f" ({verdict['decision_reason']})" if verdict.get("decision_reason") else "")
            )
        _print_cited(verdict, result["evidence"])
    size = sum(
        len(soi[k])
        for k in ("annotated_evidences", "related_claims", "thematic_cluster_evidences", "refined_cluster_evidences")
    )
    print(
        f"Retrieval: {s['mode']} alpha={s['alpha']} delta={s['delta']} k={s['similarity_top_k']}; "
        f"claim cluster {soi['cluster']}"
        + (f" (theme {soi['theme']})" if soi.get("theme") else "")
        + f"; SOI {size} of {soi['cluster_size']} cluster items"
        + _widened(soi)
    )
    if size == 0:
        import shutil

        print(textwrap.fill(_empty_reason_text(result), max(80, shutil.get_terminal_size((120, 24)).columns)))
    _print_evidence(result["evidence"])


def _widened(soi: dict[str, Any]) -> str:
    """``" (fewer than 3 above delta: the 3 most similar kept, down to cosine 0.58)"`` when ``min_size``
    widened the SOI, else ``""``."""
    low, least = soi.get("threshold"), soi.get("min_size", 0)
    if low is None or low > soi["delta"]:
        return ""
    return f" (fewer than {least} above delta: the {least} most similar kept, down to cosine {low:.2f})"


def _empty_reason_text(result: dict[str, Any]) -> str:
    """The result's ``soi.empty_reason`` text (``""`` when the SOI holds items)."""
    return str((result["soi"].get("empty_reason") or {}).get("text", ""))


def _check_batch(checker: Any, todo: list[Any], out: Any, quiet: bool = False) -> int:
    """Check ``todo`` into ``out`` (a :class:`ResultsFile`) under a progress bar; the number of claims rejected."""
    from tqdm import tqdm

    from llama_index_carag.verdicts.bulk import check_claims, is_error

    rejected = 0
    bar = tqdm(total=len(todo), desc="checking", unit="claim", file=sys.stderr, dynamic_ncols=True, disable=quiet)
    with bar:
        for record in check_claims(checker, todo):
            if is_error(record):
                rejected += 1
                bar.write(f"carag: line {record['line']}: skipped ({record['error']['message']})", file=sys.stderr)
            else:
                out.append(record)
            bar.update(1)
    return rejected


def cmd_check_claims(args: argparse.Namespace) -> int:
    """``carag check --claims FILE --out results.jsonl``: every claim of FILE checked, resumably (module docstring)."""

    if not args.out:
        raise CLIError("--claims needs --out results.jsonl (where the results are appended)")
    claims, problems = read_claims(args.claims, args.claim_col)
    for line, why in problems:
        print(f"carag: line {line}: skipped ({why})", file=sys.stderr)
    stages = _stages(args)
    with ResultsFile(args.out) as out:
        todo = [item for item in claims if not out.done(item)]
        print(f"carag: {len(claims)} claims read, {len(claims) - len(todo)} already in {args.out}", file=sys.stderr)
        if not todo:
            return 1 if problems else 0
        retriever, llm = retriever_and_verdict_llm(args, stages)
        checker = _index_checker(args.index, retriever, llm, not args.no_explanation, args.decision)
        rejected = _check_batch(checker, todo, out, stages.quiet)
    print(
        f"carag: {len(todo) - rejected} checked into {args.out}, {rejected + len(problems)} lines skipped",
        file=sys.stderr,
    )
    return 1 if rejected or problems else 0  # lines not checked: the results are incomplete


def check_one(checker: Any, claim: str, stages: Stages, *, say_retrieving: bool = True) -> dict[str, Any]:
    """``claim`` checked by ``checker`` with a stage line for retrieval (unless not ``say_retrieving``) and one
    for the verdict; the JSON dict (with the reason of an empty SOI, ``soi.empty_reason``)."""
    with (stages if say_retrieving else Stages(quiet=True)).stage("retrieving"):
        retrieved = checker.retrieve(claim)
    response = None
    if checker.synthesizer is not None:
        with stages.stage("writing the verdict", ticking=True):
            response = checker.verdict(retrieved)
    return checker.result(retrieved, response).to_json_dict()


def cmd_check(args: argparse.Namespace) -> int:
    from llama_index_carag.core.validation import check_query_text

    if (args.claim is None) == (args.claims is None):
        raise CLIError("give either one CLAIM or --claims FILE")
    if args.claims is not None:
        return cmd_check_claims(args)
    check_query_text(args.claim, "claim")  # before the models load: a bad claim fails at once
    stages = _stages(args)
    retriever, llm = retriever_and_verdict_llm(args, stages)
    checker = _index_checker(args.index, retriever, llm, not args.no_explanation, args.decision)
    result = check_one(checker, args.claim, stages)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        _print_check(result)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from llama_index_carag.verdicts.chat import FactCheckChatBot

    stages = _stages(args)
    retriever, llm = retriever_and_llm(args, stages)
    FactCheckChatBot(_index_checker(args.index, retriever, llm), llm).repl()
    return 0


def _soi_and_evidence(retriever: Any, claim: str) -> tuple[Any, list[Any], str | None]:
    """The claim's SOI, its retrieved evidence (from the same SOI computation) and why the SOI is empty (or ``None``)."""
    from llama_index_carag.verdicts.check import ClaimChecker

    retrieved = ClaimChecker(retriever).retrieve(claim)
    reason = retrieved.empty_reason
    return retrieved.soi, retrieved.nodes, None if reason is None else reason.text()


def cmd_graph(args: argparse.Namespace) -> int:
    from llama_index_carag.core.validation import check_query_text
    from llama_index_carag.visualize import write_cluster_png, write_soi_html, write_soi_png

    if not (args.html or args.png or args.cluster_png):
        raise CLIError("give at least one of --html, --png, --cluster-png")
    check_query_text(args.claim, "claim")
    stages = _stages(args)
    retriever = _load_retriever(args, stages)
    with stages.stage("retrieving"):
        soi, evidence, reason = _soi_and_evidence(retriever, args.claim)
    written = []
    if args.html:
        written.append(write_soi_html(soi, args.html, evidence=evidence, empty_reason=reason))
    if args.png:
        written.append(write_soi_png(soi, args.png, evidence=evidence, empty_reason=reason))
    if args.cluster_png:
        members = retriever.context.members((soi.theme, soi.cluster))
        kinds = ["claim" if c else "evidence" for c in members.is_claim]
        texts = [members.texts[i] for i in range(len(members.ids))]
        written.append(
            write_cluster_png(
                list(members.ids),
                texts,
                members.unit,
                kinds,
                args.cluster_png,
                threshold=args.edge_threshold,
                highlight=set(soi.item_ids),
            )
        )
    print(f"SOI of {len(soi)} items (cluster {soi.cluster}); wrote " + ", ".join(str(p) for p in written))
    if reason is not None:
        print(reason)
    return 0


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
        CLIError: an unknown extension, a file that cannot be read or is not UTF-8, or a ``.csv`` without the claim
            column.
    """
    if path == "-":
        return _txt(sys.stdin.read())
    suffix = Path(path).suffix.lower()
    if suffix not in (".txt", ".csv", ".jsonl"):
        raise CLIError(f"--claims: {path} is not a .txt, .csv or .jsonl file")
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CLIError(f"--claims: {path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except OSError as exc:
        raise CLIError(f"--claims: cannot read {path} ({exc.strerror or exc})") from None
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
