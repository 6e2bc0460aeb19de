"""Run the new-claims protocol (:mod:`~llama_index_carag.evaluation.protocol`) with every baseline and
write the table: ``carag eval --protocol`` (FactVer) and ``carag eval --beir DIR``.

The stock baselines (dense, BM25, hybrid RRF) and the CARAG variants run in one process on the same
index, the same BM25 tokenisation and the same query vectors.
"""

from __future__ import annotations

import csv
import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
from llama_index.core.schema import MetadataMode

from llama_index_carag.evaluation.protocol import (
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

__all__ = ["protocol_methods", "cached_evidence_vectors", "run_protocol", "write_protocol_results", "COLUMNS"]

COLUMNS = ["method", "queries", "nDCG@10", "recall@6", "MRR@10", "theme_precision@6", "median_ms", "p95_ms", "build_s"]


def protocol_methods() -> dict[str, Any]:
    """The CARAG variants of the table: the papers' CARAG-u, claim contrast alone, the package default."""
    from llama_index_carag.settings import DEFAULT, PAPER, CaragSettings

    return {
        "CARAG-u, papers' settings (preset paper)": PAPER,
        "claim contrast only (alpha 1, re-rank 50, beta .15, tau .8)": CaragSettings(
            alpha=1.0, rerank_candidates=50, claim_contrast=0.15, contrast_threshold=0.8
        ),
        "default: hybrid pool + context (preset default)": DEFAULT,
    }


def cached_evidence_vectors(task: RetrievalTask, model: "BaseEmbedding", cache_dir: str | Path | None, *, show_progress: bool = False) -> np.ndarray:
    """The task's evidence embeddings, shape ``(n, d)``; cached as ``.npy`` under ``cache_dir`` (keyed by
    the model name and every passage's id and text) when it is given."""
    from llama_index_carag.models import embed_model_name

    texts = [n.get_content(MetadataMode.EMBED) for n in task.evidence]
    path = None
    if cache_dir:
        digest = hashlib.sha256(embed_model_name(model).encode("utf-8"))
        for node, text in zip(task.evidence, texts):
            digest.update(b"\x00" + node.node_id.encode("utf-8", "surrogatepass") + b"\x01" + text.encode("utf-8", "surrogatepass"))
        path = Path(cache_dir) / f"evidence-{digest.hexdigest()[:16]}.npy"
        if path.is_file():
            vectors = np.load(path, allow_pickle=False)
            if vectors.shape[0] == len(texts):
                return vectors
    vectors = np.asarray(model.get_text_embedding_batch(texts, show_progress=show_progress), dtype=np.float32)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, vectors, allow_pickle=False)
        tmp.replace(path)
    return vectors


def run_protocol(
    task: RetrievalTask,
    model: "BaseEmbedding",
    *,
    methods: Mapping[str, Any] | None = None,
    cache_dir: str | Path | None = None,
    show_progress: bool = False,
) -> tuple[PreparedTask, list[dict[str, Any]]]:
    """The stock baselines and ``methods`` (default :func:`protocol_methods`) on one task."""
    vectors = cached_evidence_vectors(task, model, cache_dir, show_progress=show_progress)
    prepared = prepare_task(task, model, evidence_vectors=vectors, show_progress=show_progress)
    factories = {**stock_retrievers(prepared), **carag_retrievers(prepared, methods if methods is not None else protocol_methods())}
    return prepared, evaluate_methods(prepared, factories, show_progress=show_progress)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    return f"{value:.4f}" if isinstance(value, float) and abs(value) < 10 else str(value)


def markdown(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] = COLUMNS) -> str:
    """Rows as a Markdown table (only the columns some row has); the best nDCG@10 and recall@6 in bold."""
    cols = [c for c in columns if any(c in r for r in rows)]
    best = {c: max((r[c] for r in rows if isinstance(r.get(c), float)), default=None) for c in ("nDCG@10", "recall@6", "MRR@10")}
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" if c == "method" else "---:" for c in cols) + "|"]
    for r in rows:
        cells = []
        for c in cols:
            text = _cell(r.get(c))
            cells.append(f"**{text}**" if best.get(c) is not None and r.get(c) == best[c] else text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_protocol_results(rows: Sequence[Mapping[str, Any]], out: str | Path, stem: str, *, header: str) -> tuple[Path, Path]:
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
