"""``carag check-text``: every check-worthy claim of a text checked, a summary, ``--json`` and a report."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from llama_index_carag.cli.common import CLIError


def _read_text(source: str | None) -> str:
    """The text of ``source``: a file, or standard input for ``-``."""
    if source is None:
        raise CLIError("check-text needs a FILE (or - for standard input)")
    if source == "-":
        return sys.stdin.read()
    path = Path(source)
    if not path.is_file():
        raise CLIError(f"no file at {path}")
    return path.read_text(encoding="utf-8")


def _source_name(source: str) -> str:
    return "standard input" if source == "-" else Path(source).name


def _print_summary(result: Any) -> None:
    """Each claim with its span, label, explanation and top evidence ids; then the counts."""
    from llama_index_carag.visualize.text_report import soi_size, top_evidence_ids

    for n, claim in enumerate(result.claims, start=1):
        verdict = claim.check.verdict
        label = claim.label or "-"
        print(f"[{n}] chars {claim.start}-{claim.end}  {label}  {textwrap.shorten(claim.text, 200)}")
        if verdict is not None:
            print(f"    explanation: {verdict.explanation}")
        evidence = ", ".join(top_evidence_ids(claim)) or "none"
        size = soi_size(claim)
        soi = (
            f"SOI {size} items" if size else f"SOI empty: nothing of its cluster above δ={claim.check.soi['delta']:.2f}"
        )
        print(f"    evidence: {evidence}  ({soi})")
    for failed in result.failed:
        print(f"[-] chars {failed.start}-{failed.end}  NOT CHECKED  {textwrap.shorten(failed.claim, 200)}")
        print(f"    error: {failed.error.code}: {failed.error.message}")
    s = result.summary
    counts = ", ".join(f"{label} {count}" for label, count in s.labels.items())
    no_verdict = f", without a verdict {s.without_verdict}" if s.without_verdict else ""
    failed = f"; {s.failed} failed" if s.failed else ""
    print(f"Summary: {s.claims} claims checked in {s.sentences} sentences: {counts}{no_verdict}{failed}")


def _check_with_bar(checker: Any, found: Any, quiet: bool = False) -> Any:
    """Every claim of ``found`` checked, with a progress bar on stderr (none when ``quiet``)."""
    from tqdm.auto import tqdm

    from llama_index_carag.verdicts.bulk import iter_text_checks, text_check_result

    outcomes = []
    with tqdm(total=len(found.claims), desc="checking claims", unit="claim", file=sys.stderr, disable=quiet) as bar:
        for outcome in iter_text_checks(checker, found):
            outcomes.append(outcome)
            bar.update(1)
    return text_check_result(found, outcomes)


def cmd_check_text(args: argparse.Namespace) -> int:
    from llama_index_carag.verdicts.bulk import find_claims, text_check_result_json_schema

    if args.schema:
        print(json.dumps(text_check_result_json_schema(), indent=2, ensure_ascii=False))
        return 0
    if args.index is None:
        raise CLIError("check-text needs --index (the folder written by 'carag index')")
    if args.report and Path(args.report).suffix.lower() not in (".md", ".html", ".htm"):
        raise CLIError(f"--report {args.report}: the file must end in .md or .html")
    from llama_index_carag.cli.check import _index_checker
    from llama_index_carag.cli.common import _stages, retriever_and_llm

    stages, text = _stages(args), _read_text(args.file)
    with stages.stage("finding the check-worthy claims"):
        found = find_claims(text)
    stages.say(f"{len(found.claims)} check-worthy claims in {found.sentences} sentences")
    retriever, llm = retriever_and_llm(args, stages, load_llm=not args.no_llm)
    result = _check_with_bar(_index_checker(args.index, retriever, llm), found, stages.quiet)
    if args.report:
        from llama_index_carag.visualize.text_report import write_text_report

        path = write_text_report(result, args.report, title=f"Fact check of {_source_name(args.file)}")
        print(f"report written to {path}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_json_dict(), indent=2, ensure_ascii=False))
    else:
        _print_summary(result)
    return 1 if result.failed else 0  # a claim not checked: the report is incomplete
