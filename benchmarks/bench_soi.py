"""How often a new claim gets a non-empty Subset of Interest, how large, and what it does to retrieval.

New-claims protocol (:mod:`research.new_claims`): the query claims are never corpus
claims; the stock baselines (dense, BM25, hybrid RRF) run in the same process on the same vectors.  For
each CARAG row: nDCG@10, recall@6, MRR@10 (FactVer: theme precision@6), the share of query claims whose SOI
holds at least one item, and the median and mean SOI size.

    python benchmarks/bench_soi.py --set factver --split tune --embed-model minilm --grid --out soi.json
    python benchmarks/bench_soi.py --set scifact --split report --embed-model mpnet --out soi.json

``--split tune`` is FactVer's tuning half (queries) / SciFact's train claims in two halves (both are run,
``half 0`` and ``half 1``); ``--split report`` is FactVer's report half / SciFact's 300 test claims.
``--grid`` adds the candidates of the declared rule (``soi_min_size`` x ``alpha``, docs/RESULTS.md §0.6).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from llama_index.core.schema import QueryBundle

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import FACTVER, REPO, machine

SCIFACT = REPO.parent / "shared" / "data" / "scifact"

#: The declared rule's candidates (docs/RESULTS.md §0.6): minimum SOI sizes and claim weights.
MIN_SIZES = (3, 5, 10)
ALPHAS = (0.8, 0.9)


def tasks(name: str, split: str) -> list[Any]:
    from research.new_claims import beir_task, factver_task

    if name == "factver":
        return [factver_task(FACTVER, queries="tune" if split == "tune" else "report")]
    if split == "tune":
        return [beir_task(SCIFACT, tune_half=half) for half in (0, 1)]
    return [beir_task(SCIFACT)]


def methods(grid: bool, min_size: int | None) -> dict[str, Any]:
    from llama_index_carag.settings import DEFAULT, PAPER

    before = DEFAULT.replace(soi_min_size=0, alpha=0.8)  # the default before issue 36
    out: dict[str, Any] = {"paper": PAPER, "default before (min size 0, alpha 0.8)": before}
    if min_size is not None:
        out[f"default, min size {min_size}"] = DEFAULT.replace(soi_min_size=min_size)
    if grid:
        for alpha in ALPHAS:
            for m in MIN_SIZES:
                out[f"min size {m}, alpha {alpha}"] = DEFAULT.replace(soi_min_size=m, alpha=alpha)
    out["default (package)"] = DEFAULT
    return out


def soi_sizes(retriever: Any, queries: list[Any]) -> list[int]:
    """The SOI size of every query claim, as the retriever's provenance records it."""
    sizes = []
    for query in queries:
        hits = retriever.retrieve(QueryBundle(query.get_content()))
        sizes.append(int(hits[0].node.metadata["carag"]["soi_size"]) if hits else 0)
    return sizes


def run(task: Any, model: Any, cache_dir: str | None, named: dict[str, Any]) -> list[dict[str, Any]]:
    from research.new_claims import (
        carag_retrievers,
        evaluate_methods,
        prepare_task,
        stock_retrievers,
    )
    from research.retrieval_bench import cached_evidence_vectors

    vectors = cached_evidence_vectors(task, model, cache_dir, show_progress=True)
    prepared = prepare_task(task, model, evidence_vectors=vectors)
    built: dict[str, Any] = {}

    def keep(name: str, factory: Any) -> Any:
        def build() -> Any:
            built[name] = factory()
            return built[name]

        return build

    carag = {name: keep(name, f) for name, f in carag_retrievers(prepared, named).items()}
    rows = evaluate_methods(prepared, {**stock_retrievers(prepared), **carag})
    for row in rows:
        if row["method"] in built:
            sizes = soi_sizes(built[row["method"]], task.queries)
            row["non_empty_soi"] = round(sum(s > 0 for s in sizes) / len(sizes), 4)
            row["median_soi"] = statistics.median(sizes)
            row["mean_soi"] = round(statistics.fmean(sizes), 2)
        row["task"] = task.name
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    cols = ["task", "method", "nDCG@10", "recall@6", "MRR@10", "theme_precision@6", "non_empty_soi", "median_soi"]
    cols = [c for c in cols if any(c in r for r in rows)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(c) is None else str(r.get(c)) for c in cols) + " |")
    return "\n".join(lines)


def main() -> None:
    from llama_index_carag.models.resolve import resolve_embed_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=("factver", "scifact"), required=True)
    ap.add_argument("--split", choices=("tune", "report"), required=True)
    ap.add_argument("--embed-model", default="minilm")
    ap.add_argument("--cache-dir", default=None, help="evidence embeddings cache (research.retrieval_bench's)")
    ap.add_argument("--grid", action="store_true", help="add the declared rule's candidates")
    ap.add_argument("--min-size", type=int, default=None, help="add the default with this soi_min_size")
    ap.add_argument("--out", required=True, help="JSON file (rows are appended to what it holds)")
    args = ap.parse_args()
    model = resolve_embed_model(args.embed_model)
    out = Path(args.out)
    saved = json.loads(out.read_text()) if out.is_file() else {"machine": machine(), "rows": []}
    t0 = time.perf_counter()
    for task in tasks(args.set, args.split):
        rows = run(task, model, args.cache_dir, methods(args.grid, args.min_size))
        for row in rows:
            row.update(encoder=args.embed_model, split=args.split, set=args.set)
        saved["rows"] += rows
        print(markdown(rows), flush=True)
    out.write_text(json.dumps(saved, indent=1))
    print(f"wrote {out} in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
