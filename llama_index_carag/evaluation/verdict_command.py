"""``carag eval --verdicts``: its options and the run (the two-domain verdict benchmark).

The benchmark itself is :func:`~llama_index_carag.evaluation.verdict_decisions.run_two_domain_bench`:
the LLM outputs collected once (:mod:`~llama_index_carag.evaluation.verdict_cache`), every decision
replayed on them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from llama_index_carag.evaluation.verdict_decisions import run_two_domain_bench

__all__ = ["add_verdict_arguments", "run_verdict_command"]


def add_verdict_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--verdicts`` options of ``carag eval``."""
    p.add_argument(
        "--verdicts",
        action="store_true",
        help="verdict benchmark on two labelled domains, FactVer report half (--data) and SciFact test "
        "(--scifact): arg-max, the old rule, the stance decision, the label-free prior and the archive decision "
        "(with its learning curve) on the same cached LLM outputs",
    )
    p.add_argument("--verdict-llms", default="qwen1.5b", help="the label-scoring LLM for --verdicts (first one)")
    p.add_argument("--per-label", type=int, default=10, help="--verdicts: claims per label (T, F, N) per domain")
    p.add_argument("--tune-per-label", type=int, default=6, help=argparse.SUPPRESS)  # the retired offsets' tuning
    p.add_argument(
        "--scifact",
        default=None,
        help="--verdicts: the SciFact BEIR folder with verdicts.jsonl (default ../shared/data/scifact)",
    )
    p.add_argument(
        "--verdict-cache",
        default=None,
        help="--verdicts: JSONL cache of the LLM outputs (default OUT/verdict_cache.jsonl; resumed, never recomputed)",
    )
    p.add_argument(
        "--retrieved", action="store_true", help="--verdicts: FactVer also with the default retriever's top-k"
    )
    p.add_argument("--no-collect", action="store_true", help="--verdicts: summarise the cache only (no LLM)")


def run_verdict_command(args: argparse.Namespace) -> int:
    """``carag eval --verdicts``: :func:`~llama_index_carag.evaluation.verdict_decisions.run_two_domain_bench`."""
    if not args.data:
        raise ValueError("--verdicts needs --data (the FactVer CSV)")
    if args.per_label < 1:
        raise ValueError("--per-label must be >= 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = args.verdict_cache or str(out / "verdict_cache.jsonl")
    llm = [x.strip() for x in args.verdict_llms.split(",") if x.strip()][0]
    result = run_two_domain_bench(
        args.data,
        args.scifact or "../shared/data/scifact",
        cache,
        llm=llm,
        per_label=args.per_label,
        retrieved=args.retrieved,
        cache_dir=args.cache_dir,
        collect_first=not args.no_collect,
    )
    result["markdown"] += "\n\n" + _archive_tables(args, cache)
    (out / "verdict_decisions.md").write_text(result["markdown"], encoding="utf-8")
    (out / "verdict_decisions.json").write_text(json.dumps(result["summary"], indent=1), encoding="utf-8")
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(result["markdown"])
        print(f"cache {cache}; wrote {out / 'verdict_decisions.md'}, {out / 'verdict_decisions.json'}")
    return 0


def _archive_tables(args: argparse.Namespace, cache: str) -> str:
    """The archive decision's tables (:mod:`~llama_index_carag.evaluation.archive_bench`): the report rows of
    ``cache``, the label lean from the archive rows of ``cache`` and of the committed archive caches."""
    from llama_index_carag.evaluation import archive_bench

    caches = [cache, *[c for c in archive_bench.CACHES[1:] if Path(c).is_file()]]
    table, curve = archive_bench.run(
        args.data, args.scifact or "../shared/data/scifact", caches=caches, cache_dir=args.cache_dir
    )
    return (
        "## Archive decision (fitted on 100 labelled archive claims)\n\n"
        + archive_bench.markdown(table, archive_bench.TABLE_COLUMNS)
        + "\n\n### Learning curve (accuracy, mean ± sd over 5 samples)\n\n"
        + archive_bench.markdown(curve, archive_bench.CURVE_COLUMNS)
    )
