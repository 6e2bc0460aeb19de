"""The papers' comparison, its sweeps and ``--explain`` (formerly ``carag eval``'s research modes).

Run from the repository root::

    python -m research.eval --data ../shared/data/factver/factver_master.csv --split report --sweep --out out/minilm_report
    python -m research.eval --data ... --limit 30 --explain          # verdicts + explanations with an LLM

Both run RAG, CARAG and CARAG-u at the papers' settings (and the sweeps) on FactVer's claims
(:mod:`research.runner`).  The verifier's verdict benchmark is ``benchmarks/bench_verdicts.py``
(docs/VERDICTS.md); the retrieval benchmark on new claims is ``python -m research.retrieval_bench``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from research.runner import (
    EvalSetup,
    _explanation_column,
    first_per_theme,
    generate_explanations,
    markdown_table,
    paper_specs,
    run_specs,
    split_claims,
    sweep_specs,
    write_explanations,
    write_results,
)

__all__ = [
    "add_eval_arguments",
    "build_parser",
    "main",
    "run_eval_command",
]


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m research.eval``."""
    p = argparse.ArgumentParser(
        prog="python -m research.eval",
        description="RAG, CARAG and CARAG-u with one encoder (the papers' comparison), sweeps, explanations; "
        "CSV + Markdown",
    )
    add_eval_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    import logging
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return run_eval_command(build_parser().parse_args(argv))


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of the papers' comparison, its sweeps and ``--explain``."""
    p.add_argument("--data", default=None, help="CSV in FactVer's layout (default: the packaged demo corpus)")
    p.add_argument("--embed-model", default="minilm", help="minilm (default), mpnet, or a Hugging Face id/path")
    p.add_argument("--out", default="carag_eval", help="output folder for results.csv / results.md")
    p.add_argument(
        "--split",
        choices=["report", "tune", "all"],
        default="report",
        help="claims to evaluate: the held-out report half (default), the tuning half, or all",
    )
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="only N claims of the split, taken round-robin over the themes",
    )
    p.add_argument("--k", type=int, default=6)
    p.add_argument("--seed", type=int, default=0, help="clustering seed")
    p.add_argument("--sweep", action="store_true", help="also run the alpha / delta / t sweeps and the variants")
    p.add_argument("--explain", action="store_true", help="generate verdicts + explanations with an LLM")
    p.add_argument("--llm", default=None, help="LLM for --explain (default: offline SmolLM2-135M)")
    p.add_argument("--cache-dir", default=None, help="cache corpus embeddings here (per model)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run_eval_command(args: argparse.Namespace) -> int:
    """Run the mode ``args`` asks for; returns the exit status."""
    from llama_index_carag.datasets import load_demo_corpus, load_factver
    from llama_index_carag.models.resolve import resolve_embed_model

    if args.k < 1:
        raise ValueError("--k must be >= 1")
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be >= 1")
    corpus = load_factver(args.data) if args.data else load_demo_corpus()
    model = resolve_embed_model(args.embed_model)
    t0 = time.perf_counter()
    setup = EvalSetup.prepare(corpus, model, cache_dir=args.cache_dir, show_progress=not args.json)
    tune, report = split_claims(setup.claims, args.split_seed)
    claims = first_per_theme({"tune": tune, "report": report, "all": setup.claims}[args.split], args.limit)
    if not claims:
        raise ValueError("no claims to evaluate")
    specs = paper_specs() + (sweep_specs() if args.sweep else [])
    results = run_specs(setup, specs, claims, k=args.k, seed=args.seed)
    out = Path(args.out)
    header = (
        f"Dataset: {corpus.source} ({len(setup.corpus.evidence_nodes)} evidence, {len(setup.claims)} claims); "
        f"encoder: {setup.embed_name} for index, claims and queries; split: {args.split} "
        f"(seed {args.split_seed}), {len(claims)} claims; k={args.k}; clustering seed {args.seed}."
    )
    csv_path, md_path = write_results(results, out, header=header, k=args.k)
    summary: dict[str, Any] = {
        "header": header,
        "results": [s.as_row() for _, s in results],
        "files": [str(csv_path), str(md_path)],
        "seconds": None,
    }
    if args.explain:
        summary.update(_explain(args, setup, claims, model, out, md_path, summary["files"]))
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(md_path.read_text(encoding="utf-8"))
        print(f"wrote {', '.join(summary['files'])} in {summary['seconds']} s")
    return 0


def _verdict_rows(explained: dict[str, Any]) -> list[dict[str, Any]]:
    from research.verdict_metrics import accuracy, macro_f1

    rows = []
    for name, verdicts in explained["methods"].items():
        pred = [v.label.to_fever() for v in verdicts]
        pairs = [(g, p) for g, p in zip(explained["gold"], pred) if g in ("T", "F", "N")]
        rows.append(
            {
                "method": name,
                "accuracy": round(accuracy([g for g, _ in pairs], [p for _, p in pairs]), 4),
                "macro_F1": round(macro_f1([g for g, _ in pairs], [p for _, p in pairs]), 4),
                "parsed": sum(v.parsed for v in verdicts),
                "claims": len(verdicts),
            }
        )
    return rows


def _explain(
    args: argparse.Namespace,
    setup: EvalSetup,
    claims: list[Any],
    model: Any,
    out: Path,
    md_path: Path,
    files: list[str],
) -> dict[str, Any]:
    """``--explain``: verdicts and explanations, their scores and thematic alignment (appended to results.md)."""
    from llama_index_carag.models.resolve import resolve_llm
    from llama_index_carag.stores.vector_stores import get_node_embeddings
    from research.alignment import thematic_alignment

    llm = resolve_llm(args.llm)
    explained = generate_explanations(setup, paper_specs()[:3], claims, llm, k=args.k, seed=args.seed)
    files.append(str(write_explanations(explained, out)))
    verdict_rows = _verdict_rows(explained)
    texts = {_explanation_column(m): [v.explanation for v in vs] for m, vs in explained["methods"].items()}
    vectors = {m: np.asarray(model.get_text_embedding_batch(t), np.float32) for m, t in texts.items()}
    themes = [str(t) for t in explained["themes"]]
    ids, corpus_vectors = get_node_embeddings(setup.index)
    corpus_themes = [str(setup.evidence_themes.get(i)) for i in ids]
    table = thematic_alignment(corpus_vectors, corpus_themes, vectors, themes, seed=args.seed)
    extra = "\n\n### verdicts (" + f"{len(claims)} claims, LLM {getattr(llm, 'model_name', type(llm).__name__)})\n\n"
    extra += markdown_table(verdict_rows, ["method", "accuracy", "macro_F1", "parsed", "claims"])
    extra += "\n\n### thematic alignment of the explanations (lower = closer to the theme; t-SNE seed "
    extra += f"{args.seed})\n\n" + table.to_markdown() + "\n"
    with md_path.open("a", encoding="utf-8") as fh:
        fh.write(extra)
    return {"verdicts": verdict_rows, "alignment": table.to_dict()}


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
