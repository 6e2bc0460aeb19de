"""The one re-ranking stage: combine the scorers' weighted terms, select, write provenance.

Every node the stage returns carries its provenance dict under ``metadata[CARAG_METADATA_KEY]``
(:func:`with_carag_metadata`), hidden from embeddings and LLMs.

A :class:`Scorer` gives every candidate of a pool a score (``scores(pool, query)``) and says how much it counts
for given settings (``weight(settings, query)``).  The :class:`RerankStage` ranks by ``sum(weight * scores)`` over
the scorers whose weight is not 0, and writes each term into the provenance dict under the scorer's ``name``.

The stage's own terms come first: ``(1 - w) * dense + w * thematic`` (:class:`DenseSimilarity`,
:class:`ThematicSimilarity`) with ``w = (1 - alpha) * s`` (:func:`thematic_weight`), ``s`` the share of the SOI's
items that ``soi_min_size`` did not add below ``delta`` (so ``alpha * dense + (1 - alpha) * thematic`` under the
papers' rule; ``dense`` alone when the SOI is empty or when ``soi_min_size`` alone filled it: items below ``delta``
explain, they do not re-rank).  Then the registered re-ranking terms: each is one
:class:`~llama_index_carag.ranking.rerank_term.RerankTerm` in the registry of :mod:`llama_index_carag.ranking.assembly`
(its weight, range, calibration grid, optional fitted table and scorer), wrapped into a :class:`Scorer` weighted by
the term.  A :class:`Scorer` may also be passed to the retriever directly (``scorers=[...]``), weighting itself.

Used by :class:`~llama_index_carag.retrieval.retriever.ContextAwareRetriever` and by
:class:`~llama_index_carag.retrieval.postprocessor.ThematicContextPostprocessor` alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore

from llama_index_carag.core.validation import normalize_text
from llama_index_carag.ranking.pool import CandidatePool, RankQuery
from llama_index_carag.settings import CaragSettings

#: Key of the provenance dict attached to every returned node.
CARAG_METADATA_KEY = "carag"


def with_carag_metadata(node: BaseNode, info: dict[str, Any]) -> BaseNode:
    """A shallow copy of ``node`` with ``metadata["carag"] = info``, the key hidden from embeddings and LLMs."""
    metadata = dict(node.metadata)
    metadata[CARAG_METADATA_KEY] = info
    embed_excl = list(node.excluded_embed_metadata_keys)
    llm_excl = list(node.excluded_llm_metadata_keys)
    if CARAG_METADATA_KEY not in embed_excl:
        embed_excl.append(CARAG_METADATA_KEY)
    if CARAG_METADATA_KEY not in llm_excl:
        llm_excl.append(CARAG_METADATA_KEY)
    return node.model_copy(
        update={
            "metadata": metadata,
            "excluded_embed_metadata_keys": embed_excl,
            "excluded_llm_metadata_keys": llm_excl,
        }
    )


@runtime_checkable
class Scorer(Protocol):
    """One term of the re-ranking score."""

    name: str

    def scores(self, pool: CandidatePool, query: RankQuery) -> np.ndarray:
        """Shape ``(len(pool),)``: the term for every candidate."""
        ...

    def weight(self, settings: CaragSettings, query: RankQuery) -> float:
        """The term's weight in the final score (0 = not used)."""
        ...


class DenseSimilarity:
    """``sim(q, n)``: the pool's ``dense`` column (cosine to the claim)."""

    name = "dense"

    def scores(self, pool: CandidatePool, query: RankQuery) -> np.ndarray:
        return pool.columns["dense"]

    def weight(self, settings: CaragSettings, query: RankQuery) -> float:
        return 1.0 - thematic_weight(settings, query)


class ThematicSimilarity:
    """``sim(T, n)``: cosine to the thematic embedding (weight :func:`thematic_weight`)."""

    name = "thematic"

    def scores(self, pool: CandidatePool, query: RankQuery) -> np.ndarray:
        if query.theme_unit is None:
            return np.zeros(len(pool), dtype=np.float32)
        if "thematic" not in pool.columns:
            pool.columns["thematic"] = pool.similarity(query.theme_unit)
        return pool.columns["thematic"]

    def weight(self, settings: CaragSettings, query: RankQuery) -> float:
        return thematic_weight(settings, query)


def thematic_weight(settings: CaragSettings, query: RankQuery) -> float:
    """``(1 - alpha)`` times the share of the SOI's items not added below ``delta`` by ``soi_min_size`` (0 for an
    empty SOI)."""
    return (1.0 - settings.alpha) * query.theme_support


class RerankStage:
    """Ranks a :class:`CandidatePool` by ``sum(weight * term)`` over its scorers.

    Args:
        settings: where the weights come from (each scorer's ``weight(settings, query)``).
        scorers: the terms; :class:`DenseSimilarity` and :class:`ThematicSimilarity` are
            added in front when missing.
    """

    def __init__(self, settings: CaragSettings, scorers: Sequence[Scorer] = ()) -> None:
        names = {s.name for s in scorers}
        base: list[Scorer] = [s for s in (DenseSimilarity(), ThematicSimilarity()) if s.name not in names]
        self.settings = settings
        self.scorers: list[Scorer] = base + list(scorers)

    def score(self, pool: CandidatePool, query: RankQuery) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(final score (n,) float64, -inf where the vector is unknown; {name: term} of the active terms})``."""
        total = np.zeros(len(pool), dtype=np.float64)
        terms: dict[str, np.ndarray] = {}
        for scorer in self.scorers:
            weight = scorer.weight(self.settings, query)
            if weight == 0:
                continue
            values = scorer.scores(pool, query)
            terms[scorer.name] = values
            total += weight * np.asarray(values, dtype=np.float64)
        total[~pool.known] = -np.inf
        return total, terms

    def rank(
        self,
        pool: CandidatePool,
        query: RankQuery,
        *,
        rerank: bool = True,
        limit: int | None = None,
        dedupe: bool = False,
        extra: dict[str, Any] | Callable[[int], dict[str, Any]] | None = None,
        keep: Callable[[int, dict[str, Any]], bool] | None = None,
    ) -> list[NodeWithScore]:
        """The pool ranked (or, with ``rerank=False``, in the sources' order and scores), annotated.

        Args:
            limit: return at most this many nodes.
            dedupe: at most one node per distinct text (case and spacing ignored).
            extra: more provenance keys for every node (or ``extra(row) -> dict``).
            keep: ``keep(row, info) -> bool`` drops candidates (after scoring).
        """
        if rerank:
            final, terms = self.score(pool, query)
            order = np.argsort(-final, kind="stable")
            scores: list[Any] = [None if not np.isfinite(v) else float(v) for v in final]
        else:
            terms = {}
            order = np.arange(len(pool))
            scores = pool.source_scores()
        thematic = ThematicSimilarity().scores(pool, query) if query.theme_unit is not None else None
        dense = pool.columns["dense"]
        out: list[NodeWithScore] = []
        seen_texts: set[str] = set()
        rows = order.tolist()
        if limit is not None:  # nodes of a pool built from ids are read only for what is returned
            pool.prefetch(rows[: limit * (4 if dedupe else 1)])
        for r in rows:
            node = pool.node_at(r)
            if node is None:
                continue
            if dedupe:
                text = normalize_text(node.get_content(MetadataMode.NONE))
                if text in seen_texts:
                    continue
                seen_texts.add(text)
            info = self._provenance(pool, query, r, dense, thematic)
            if rerank:
                info["terms"] = {name: float(values[r]) for name, values in terms.items()}
            info.update((extra(r) if callable(extra) else extra) or {})
            if keep is not None and not keep(r, info):
                continue
            out.append(NodeWithScore(node=with_carag_metadata(node, info), score=scores[r]))
            if limit is not None and len(out) == limit:
                break
        return out

    def _provenance(
        self, pool: CandidatePool, query: RankQuery, r: int, dense: np.ndarray, thematic: np.ndarray | None
    ) -> dict[str, Any]:
        known = bool(pool.known[r])
        node_id = pool.ids[r]
        return {
            "mode": query.mode,
            "alpha": self.settings.alpha,
            "delta": self.settings.delta,
            "soi_min_size": self.settings.soi_min_size,
            "cluster": pool.clusters[r],
            "query_cluster": query.query_cluster,
            "query_theme": query.query_theme,
            "claim_id": query.claim_id,
            "claim_similarity": float(dense[r]) if known else None,
            "thematic_similarity": float(thematic[r]) if (known and thematic is not None) else None,
            "in_soi": node_id in query.kinds,
            "soi_kind": query.kinds.get(node_id),
            "soi_size": query.soi_size,
            "soi_filled": query.soi_filled,
            "fallback": query.fallback,
        }
