"""The retrieval benchmark on new claims: every baseline and CARAG variant on the protocol of
:mod:`research.new_claims`, written as a table (CSV + Markdown); formerly ``carag eval``.

The stock baselines (dense, BM25, hybrid RRF) and the CARAG variants run in one process on the same
index, the same BM25 tokenisation and the same query vectors.  Run from the repository root::

    python -m research.retrieval_bench --protocol --data ../shared/data/factver/factver_master.csv --cache-dir .cache/eval
    python -m research.retrieval_bench --beir ../shared/data/scifact [--split tune --tune-half 0|1]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import logging
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.schema import MetadataMode

from llama_index_carag.core.atomic import atomic_write
from research.new_claims import (
    PreparedTask,
    RetrievalTask,
    carag_retrievers,
    evaluate_methods,
    prepare_task,
    stock_retrievers,
)

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding

logger = logging.getLogger(__name__)

__all__ = ["protocol_methods", "cached_evidence_vectors", "run_protocol", "write_protocol_results", "COLUMNS", "main"]

COLUMNS = ["method", "queries", "nDCG@10", "recall@6", "MRR@10", "theme_precision@6", "median_ms", "p95_ms", "build_s"]


def protocol_methods() -> dict[str, Any]:
    """The CARAG variants of the table: the papers' CARAG-u, claim contrast alone, the package default
    (with the corpus claims, and without any), and the default calibrated on the corpus claims' links."""
    from llama_index_carag.settings import DEFAULT, PAPER
    from research.new_claims import CaragMethod

    return {
        "CARAG-u, papers' settings (preset paper)": PAPER,
        "claim contrast only (alpha 1, re-rank 50, beta .15, tau .8)": PAPER.replace(
            alpha=1.0, rerank_candidates=50, claim_contrast=0.15, contrast_threshold=0.8
        ),
        "default: hybrid pool + context (preset default)": DEFAULT,
        "default without corpus claims": CaragMethod(DEFAULT, claims=False),
        "default, calibrated on the corpus claims' links (--calibrate)": CaragMethod(DEFAULT, calibrate=True),
    }


def cached_evidence_vectors(
    task: RetrievalTask, model: BaseEmbedding, cache_dir: str | Path | None, *, show_progress: bool = False
) -> np.ndarray:
    """The task's evidence embeddings, shape ``(n, d)``; cached as ``.npy`` under ``cache_dir`` (keyed by
    the model name and every passage's id and text) when it is given."""
    from llama_index_carag.models.resolve import embed_model_name

    texts = [n.get_content(MetadataMode.EMBED) for n in task.evidence]
    path = None
    if cache_dir:
        digest = hashlib.sha256(embed_model_name(model).encode("utf-8"))
        for node, text in zip(task.evidence, texts):
            digest.update(
                b"\x00"
                + node.node_id.encode("utf-8", "surrogatepass")
                + b"\x01"
                + text.encode("utf-8", "surrogatepass")
            )
        path = Path(cache_dir) / f"evidence-{digest.hexdigest()[:16]}.npy"
        if path.is_file():
            vectors = np.load(path, allow_pickle=False)
            if vectors.shape[0] == len(texts):
                return vectors
    vectors = np.asarray(model.get_text_embedding_batch(texts, show_progress=show_progress), dtype=np.float32)
    if path is not None:
        atomic_write(path, lambda tmp: _save_npy(tmp, vectors))
    return vectors


def _save_npy(path: Path, array: np.ndarray) -> None:
    with path.open("wb") as fh:  # a file object: np.save would append ".npy" to a path
        np.save(fh, array, allow_pickle=False)


def run_protocol(
    task: RetrievalTask,
    model: BaseEmbedding,
    *,
    methods: Mapping[str, Any] | None = None,
    cache_dir: str | Path | None = None,
    show_progress: bool = False,
) -> tuple[PreparedTask, list[dict[str, Any]]]:
    """The stock baselines and ``methods`` (default :func:`protocol_methods`) on one task."""
    vectors = cached_evidence_vectors(task, model, cache_dir, show_progress=show_progress)
    prepared = prepare_task(task, model, evidence_vectors=vectors, show_progress=show_progress)
    factories = {
        **stock_retrievers(prepared),
        **carag_retrievers(prepared, methods if methods is not None else protocol_methods()),
    }
    return prepared, evaluate_methods(prepared, factories, show_progress=show_progress)


def _cell(column: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.2f}" if column.endswith(("_ms", "_s")) else f"{value:.4f}"
    return str(value)


def markdown(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] = COLUMNS) -> str:
    """Rows as a Markdown table (only the columns some row has); the best nDCG@10 and recall@6 in bold."""
    cols = [c for c in columns if any(c in r for r in rows)]
    best = {
        c: max((r[c] for r in rows if isinstance(r.get(c), float)), default=None)
        for c in ("nDCG@10", "recall@6", "MRR@10")
    }
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" if c == "method" else "---:" for c in cols) + "|"]
    for r in rows:
        cells = []
        for c in cols:
            text = _cell(c, r.get(c))
            cells.append(f"**{text}**" if best.get(c) is not None and r.get(c) == best[c] else text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_protocol_results(
    rows: Sequence[Mapping[str, Any]], out: str | Path, stem: str, *, header: str
) -> tuple[Path, Path]:
    """Write ``<out>/<stem>.csv`` and ``<out>/<stem>.md`` (the header line, then the table)."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = folder / f"{stem}.csv", folder / f"{stem}.md"
    cols = [c for c in COLUMNS if any(c in r for r in rows)]
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    md_path.write_text(f"{header}\n\n{markdown(rows)}\n", encoding="utf-8")
    return csv_path, md_path


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``python -m research.retrieval_bench`` (formerly ``carag eval``)."""
    p = argparse.ArgumentParser(
        prog="python -m research.retrieval_bench",
        description="the retrieval benchmark on new claims: dense, BM25, hybrid RRF and CARAG side by side",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--protocol", action="store_true", help="on --data (FactVer layout; the demo corpus by default)")
    where.add_argument(
        "--beir",
        default=None,
        metavar="DIR",
        help="on a BEIR-format folder (e.g. ../shared/data/scifact): queries from --beir-split, corpus claims = "
        "the train split's queries",
    )
    p.add_argument("--data", default=None, help="CSV in FactVer's layout (default: the packaged demo corpus)")
    p.add_argument("--embed-model", default="minilm", help="minilm (default), mpnet, or a Hugging Face id/path")
    p.add_argument("--out", default="carag_eval", help="output folder for the .csv / .md tables")
    p.add_argument(
        "--split",
        choices=["report", "tune"],
        default="report",
        help="query claims: the held-out report half (default) or the tuning half",
    )
    p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N query claims")
    p.add_argument("--cache-dir", default=None, help="cache passage embeddings here (per model)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--beir-split", default="test", help="BEIR qrels split of the queries (default test)")
    p.add_argument(
        "--tune-half",
        type=int,
        choices=[0, 1],
        default=0,
        help="with --beir and --split tune: which half of the train queries are the queries",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Every baseline and the CARAG variants on the new-claims protocol; writes ``<out>/protocol_<name>.{csv,md}``."""
    import json
    import os
    import re

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from llama_index_carag.datasets import demo_corpus_path
    from llama_index_carag.models.resolve import embed_model_name, resolve_embed_model
    from research.new_claims import beir_task, factver_task

    args = build_parser().parse_args(argv)
    split = args.split
    if args.beir:
        tune_half = None if split == "report" else args.tune_half
        task = beir_task(args.beir, split=args.beir_split, tune_half=tune_half)
    else:
        task = factver_task(args.data or demo_corpus_path(), queries=split)
    if args.limit is not None:
        keep = task.queries[: args.limit]
        task = type(task)(
            task.name + f" (first {len(keep)} queries)",
            task.evidence,
            task.corpus_claims,
            keep,
            {q.node_id: task.gold[q.node_id] for q in keep},
            task.evidence_themes,
            task.query_themes,
        )
    model = resolve_embed_model(args.embed_model)
    prepared, rows = run_protocol(task, model, cache_dir=args.cache_dir, show_progress=not args.json)
    header = (
        f"{task.name}: {len(task.evidence)} passages, {len(task.queries)} query claims, {len(task.corpus_claims)} "
        f"corpus claims (never the queries); encoder {embed_model_name(model)} for passages, claims and queries "
        f"(query embedding {prepared.query_embed_ms:.1f} ms median, not in the latencies below); "
        f"nDCG@10 / recall@6 / MRR@10 against the gold passages."
    )
    stem = "protocol_" + re.sub(r"[^a-z0-9]+", "_", f"{task.name} {args.embed_model}".lower()).strip("_")
    csv_path, md_path = write_protocol_results(rows, args.out, stem, header=header)
    if args.json:
        print(json.dumps({"header": header, "results": rows, "files": [str(csv_path), str(md_path)]}, indent=2))
    else:
        print(md_path.read_text(encoding="utf-8"))
        print(f"wrote {csv_path}, {md_path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
