"""Retrieval metrics: theme precision@k, annotated-evidence recall@k, MRR.

Every metric is a small pure function defined exactly in its docstring; the
``evaluate_*`` helpers run a retriever over a set of claims and aggregate.

Retrieval (per claim, then averaged over claims):

* :func:`theme_precision_at_k` — share of the retrieved evidence on the claim's theme.
* :func:`annotated_recall_at_k` — share of the claim's annotated evidence retrieved.
* :func:`reciprocal_rank` — 1 / rank of the first annotated passage (0 if none).
* :func:`annotated_text_recall_at_k` — annotated recall on passage *texts*: FactVer
  annotates the same passage for several claims (2,112 of its 3,092 evidence
  rows share their text with another row), so retrieving an identical copy
  under another claim's id is retrieving the annotated evidence.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llama_index_carag.core.validation import normalize_text
from llama_index_carag.ranking.stage import CARAG_METADATA_KEY

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

logger = logging.getLogger(__name__)

__all__ = [
    "theme_precision_at_k",
    "annotated_recall_at_k",
    "reciprocal_rank",
    "annotated_text_recall_at_k",
    "RetrievalResult",
    "RetrievalSummary",
    "evaluate_retrieval",
    "summarize_retrieval",
]


def theme_precision_at_k(retrieved_themes: Sequence[str | None], claim_theme: str | None, k: int) -> float:
    """Theme precision@k: of the first ``k`` retrieved passages, the share whose theme is the claim's.

    ``precision = |{i < k : retrieved_themes[i] == claim_theme}| / min(k, len(retrieved_themes))``.
    Fewer than ``k`` results are scored on what was returned; no results score 0.

    Raises:
        ValueError: ``k < 1``.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    top = list(retrieved_themes)[:k]
    if not top:
        return 0.0
    return sum(t == claim_theme for t in top) / len(top)


def annotated_recall_at_k(retrieved_ids: Sequence[str], gold_ids: Iterable[str], k: int) -> float:
    """Annotated-evidence recall@k: ``|top_k ∩ gold| / |gold|``.

    ``gold`` is the claim's annotated evidence.  Duplicated ids among the
    retrieved count once.  With more gold passages than ``k`` the maximum is
    ``k / |gold|``.  Returns NaN for an empty gold set (undefined; such claims
    are left out of averages).
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    gold = set(gold_ids)
    if not gold:
        return math.nan
    return len(set(list(retrieved_ids)[:k]) & gold) / len(gold)


def annotated_text_recall_at_k(retrieved_texts: Sequence[str], gold_texts: Iterable[str], k: int) -> float:
    """Annotated recall@k by content: ``|texts(top_k) ∩ texts(gold)| / |texts(gold)|``.

    Texts are compared after :func:`normalize_text`; identical gold passages
    count once.  NaN for an empty gold set.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    gold = {normalize_text(t) for t in gold_texts}
    if not gold:
        return math.nan
    return len({normalize_text(t) for t in list(retrieved_texts)[:k]} & gold) / len(gold)


def reciprocal_rank(retrieved_ids: Sequence[str], gold_ids: Iterable[str], k: int | None = None) -> float:
    """Reciprocal rank: ``1 / r`` for the 1-based rank ``r`` of the first gold passage
    within the first ``k`` (all if ``None``), else 0.  NaN for an empty gold set.
    Mean over claims = MRR."""
    gold = set(gold_ids)
    if not gold:
        return math.nan
    ranked = list(retrieved_ids) if k is None else list(retrieved_ids)[:k]
    for rank, node_id in enumerate(ranked, start=1):
        if node_id in gold:
            return 1.0 / rank
    return 0.0


@dataclass
class RetrievalResult:
    """One claim's retrieval, scored."""

    claim_id: str
    theme: str | None
    retrieved: list[str]
    theme_precision: float
    recall: float
    rr: float
    text_recall: float = math.nan
    soi_size: int | None = None
    fallback: bool | None = None
    seconds: float = 0.0


@dataclass
class RetrievalSummary:
    """Averages over claims (NaN recalls/RRs of claims without gold are left out)."""

    method: str
    k: int
    n_claims: int
    theme_precision: float
    recall: float
    mrr: float
    text_recall: float
    soi_size: float | None
    empty_soi_rate: float | None
    median_ms: float
    extra: dict[str, Any] = field(default_factory=dict)

    def as_row(self) -> dict[str, Any]:
        row = {
            "method": self.method,
            "k": self.k,
            "claims": self.n_claims,
            f"theme_precision@{self.k}": round(self.theme_precision, 4),
            f"annotated_recall@{self.k}": round(self.recall, 4),
            f"text_recall@{self.k}": round(self.text_recall, 4),
            "MRR": round(self.mrr, 4),
            "mean_soi_size": None if self.soi_size is None else round(self.soi_size, 2),
            "empty_soi_rate": None if self.empty_soi_rate is None else round(self.empty_soi_rate, 4),
            "median_ms": round(self.median_ms, 2),
        }
        row.update(self.extra)
        return row


def _nanmean(values: Iterable[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else math.nan


def summarize_retrieval(method: str, k: int, results: Sequence[RetrievalResult], **extra: Any) -> RetrievalSummary:
    """Average per-claim results into a :class:`RetrievalSummary`."""
    sizes = [r.soi_size for r in results if r.soi_size is not None]
    falls = [r.fallback for r in results if r.fallback is not None]
    return RetrievalSummary(
        method=method,
        k=k,
        n_claims=len(results),
        theme_precision=_nanmean(r.theme_precision for r in results),
        recall=_nanmean(r.recall for r in results),
        mrr=_nanmean(r.rr for r in results),
        text_recall=_nanmean(r.text_recall for r in results),
        soi_size=(sum(sizes) / len(sizes)) if sizes else None,
        empty_soi_rate=(sum(falls) / len(falls)) if falls else None,
        median_ms=statistics.median(r.seconds for r in results) * 1000 if results else math.nan,
        extra=dict(extra),
    )


def evaluate_retrieval(
    retriever: BaseRetriever,
    claims: Sequence[BaseNode],
    evidence_themes: Mapping[str, str | None],
    gold: Mapping[str, Iterable[str]],
    *,
    k: int,
    gold_texts: Mapping[str, Iterable[str]] | None = None,
    theme_key: str = "theme",
    use_claim_embeddings: bool = True,
    show_progress: bool = False,
) -> list[RetrievalResult]:
    """Run ``retriever`` on every claim and score the top ``k``.

    Args:
        retriever: any LlamaIndex retriever (its own top-k must be >= ``k``).
        claims: claim nodes; the claim text is the query.  With
            ``use_claim_embeddings`` and a claim embedding set, it is passed as
            the query embedding (same encoder, saves re-embedding).
        evidence_themes: evidence node id → theme.
        gold: claim id (node id) → annotated evidence ids.
        k: cut-off.
        gold_texts: claim id → annotated evidence texts (enables ``text_recall``).
    """
    out: list[RetrievalResult] = []
    for claim in _progress(claims, show_progress):
        nodes, seconds = _timed_retrieve(retriever, _claim_query(claim, use_claim_embeddings))
        out.append(
            _score_claim(claim, nodes, seconds, evidence_themes, gold, k=k, gold_texts=gold_texts, theme_key=theme_key)
        )
    return out


def _progress(claims: Sequence[BaseNode], show_progress: bool) -> Iterable[BaseNode]:
    """Take the claims and whether to show progress; return them as is, or wrapped in a ``tqdm`` bar."""
    if not show_progress:
        return claims
    from tqdm.auto import tqdm

    return tqdm(claims, desc="Evaluating", unit="claim")


def _claim_query(claim: BaseNode, use_claim_embeddings: bool) -> QueryBundle:
    """Take a claim node; return its ``QueryBundle`` (text, plus its embedding when asked for and set)."""
    from llama_index.core.schema import QueryBundle

    return QueryBundle(
        claim.get_content(),
        embedding=claim.embedding if (use_claim_embeddings and claim.embedding is not None) else None,
    )


def _timed_retrieve(retriever: BaseRetriever, bundle: QueryBundle) -> tuple[list[NodeWithScore], float]:
    """Take a retriever and a query bundle; return the retrieved nodes and the seconds retrieval took."""
    t0 = time.perf_counter()
    nodes = retriever.retrieve(bundle)
    return nodes, time.perf_counter() - t0


def _score_claim(
    claim: BaseNode,
    nodes: Sequence[NodeWithScore],
    seconds: float,
    evidence_themes: Mapping[str, str | None],
    gold: Mapping[str, Iterable[str]],
    *,
    k: int,
    gold_texts: Mapping[str, Iterable[str]] | None,
    theme_key: str,
) -> RetrievalResult:
    """Take a claim, its retrieved ``NodeWithScore`` list and timing; return its scored :class:`RetrievalResult`.

    The CARAG ``soi_size``/``fallback`` come from the first node's ``carag`` metadata (``None`` if absent).
    """
    ids = [n.node.node_id for n in nodes][:k]
    texts = [n.node.get_content() for n in nodes][:k]
    theme = claim.metadata.get(theme_key)
    info = nodes[0].node.metadata.get(CARAG_METADATA_KEY, {}) if nodes else {}
    return RetrievalResult(
        claim_id=claim.node_id,
        theme=theme,
        retrieved=ids,
        theme_precision=theme_precision_at_k([evidence_themes.get(i) for i in ids], theme, k),
        recall=annotated_recall_at_k(ids, gold.get(claim.node_id, ()), k),
        rr=reciprocal_rank(ids, gold.get(claim.node_id, ()), k),
        text_recall=(
            annotated_text_recall_at_k(texts, gold_texts.get(claim.node_id, ()), k)
            if gold_texts is not None
            else math.nan
        ),
        soi_size=info.get("soi_size"),
        fallback=info.get("fallback"),
        seconds=seconds,
    )
