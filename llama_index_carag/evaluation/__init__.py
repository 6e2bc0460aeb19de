"""Evaluation: retrieval metrics, verdict metrics, the papers' thematic alignment, and runners.

* :mod:`~llama_index_carag.evaluation.retrieval` — theme precision@k, annotated recall@k, MRR.
* :mod:`~llama_index_carag.evaluation.alignment` — explanation-to-theme-centroid distances (PCA / t-SNE).
"""

from llama_index_carag.evaluation.alignment import (
    AlignmentTable,
    centroid_distances,
    project_2d,
    thematic_alignment,
)
from llama_index_carag.evaluation.retrieval import (
    RetrievalResult,
    RetrievalSummary,
    annotated_recall_at_k,
    evaluate_retrieval,
    reciprocal_rank,
    summarize_retrieval,
    theme_precision_at_k,
)

__all__ = [
    "AlignmentTable",
    "RetrievalResult",
    "RetrievalSummary",
    "annotated_recall_at_k",
    "centroid_distances",
    "evaluate_retrieval",
    "project_2d",
    "reciprocal_rank",
    "summarize_retrieval",
    "thematic_alignment",
    "theme_precision_at_k",
]
