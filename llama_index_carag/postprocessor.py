"""CARAG as a node postprocessor, for users who keep their own retriever.

:class:`ThematicContextPostprocessor` takes the nodes *any* retriever returned,
computes the query's Subset of Interest and thematic embedding ``T``, re-ranks
by ``alpha * sim(q, n) + (1 - alpha) * sim(T, n)``, optionally drops nodes whose
thematic similarity is below a cut-off, and attaches the same ``carag``
provenance the :class:`~llama_index_carag.retriever.ContextAwareRetriever` does.

Two sources of thematic context:

* ``ThematicContextPostprocessor.from_retriever(retriever)`` reuses a fitted
  ``ContextAwareRetriever``: the SOI comes from the whole corpus, built with the
  retriever's current clustering (also after ``refit()``) and SOI settings, and
  node vectors are the stored ones.
* ``ThematicContextPostprocessor.from_clusterer(clusterer, embed_model)`` uses a
  fitted :class:`~llama_index_carag.clustering.ThematicClusterer` only: the
  candidates themselves are assigned to clusters and the SOI is the
  candidates of the query's cluster with similarity ``> delta`` (CARAG-u's rule
  on the retrieved pool).  Candidates without an embedding are embedded, one
  batch per query.

The docstore is never modified: returned nodes are copies.
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_validator
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_carag._validation import check_alpha, check_delta
from llama_index_carag.clustering import ThematicClusterer
from llama_index_carag.context import ThematicContext
from llama_index_carag.retriever import _with_carag_metadata
from llama_index_carag.soi import ClusterMembers, SubsetOfInterest, build_unsupervised_soi
from llama_index_carag.vectors import as_vector, l2_normalize

logger = logging.getLogger(__name__)

__all__ = ["ThematicContextPostprocessor"]


class ThematicContextPostprocessor(BaseNodePostprocessor):
    """Re-rank any retriever's nodes by claim and thematic similarity (CARAG as a postprocessor).

    Attributes:
        alpha: weight of the claim similarity, ``[0, 1]`` (1 keeps the claim-only ranking).
        delta: SOI threshold on cosine similarity to the claim, ``[-1, 1]``.
        thematic_cutoff: drop nodes whose cosine similarity to ``T`` is below
            this (``None`` keeps all; ignored when the SOI is empty).
        top_n: keep at most this many nodes after re-ranking (``None``: all).
    """

    alpha: float = Field(default=0.5, description="Weight of sim(q, n) in the new score.")
    delta: float = Field(default=0.75, description="SOI cosine threshold.")
    thematic_cutoff: Optional[float] = Field(default=None, description="Minimum sim(T, n) to keep a node.")
    top_n: Optional[int] = Field(default=None, description="Nodes kept after re-ranking.")

    _context: ThematicContext | None = PrivateAttr(default=None)
    _retriever: Any = PrivateAttr(default=None)
    _clusterer: ThematicClusterer | None = PrivateAttr(default=None)
    _embed_model: BaseEmbedding | None = PrivateAttr(default=None)

    @field_validator("alpha")
    @classmethod
    def _check_alpha(cls, v: float) -> float:
        return check_alpha(v)

    @field_validator("delta")
    @classmethod
    def _check_delta(cls, v: float) -> float:
        return check_delta(v)

    @field_validator("thematic_cutoff")
    @classmethod
    def _check_cutoff(cls, v: Optional[float]) -> Optional[float]:
        return None if v is None else check_delta(v)

    @field_validator("top_n")
    @classmethod
    def _check_top_n(cls, v: Optional[int]) -> Optional[int]:
        if v is not None and (isinstance(v, bool) or v < 1):
            raise ValueError(f"top_n must be None or >= 1; got {v!r}.")
        return v

    def __init__(
        self,
        *,
        context: ThematicContext | None = None,
        clusterer: ThematicClusterer | None = None,
        embed_model: BaseEmbedding | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (context is None) == (clusterer is None):
            raise ValueError("Give exactly one of context= (a fitted ThematicContext) or clusterer=.")
        if context is not None and not hasattr(context, "dim_"):
            raise ValueError("The ThematicContext is not fitted.")
        if clusterer is not None and not hasattr(clusterer, "gmm_"):
            raise ValueError("The ThematicClusterer is not fitted; call fit() first.")
        self._context = context
        self._clusterer = clusterer
        self._embed_model = embed_model

    @classmethod
    def class_name(cls) -> str:
        return "ThematicContextPostprocessor"

    @classmethod
    def from_retriever(cls, retriever: Any, **kwargs: Any) -> "ThematicContextPostprocessor":
        """Reuse a fitted ``ContextAwareRetriever``'s clustering, embed model and (by default) alpha/delta."""
        kwargs.setdefault("alpha", retriever.alpha)
        kwargs.setdefault("delta", retriever.delta)
        pp = cls(context=retriever.context, embed_model=retriever.embed_model, **kwargs)
        pp._retriever = retriever  # follow its context through refit() and its SOI settings
        return pp

    @property
    def _ctx(self) -> ThematicContext | None:
        return self._retriever.context if self._retriever is not None else self._context

    @classmethod
    def from_clusterer(
        cls, clusterer: ThematicClusterer, embed_model: BaseEmbedding, **kwargs: Any
    ) -> "ThematicContextPostprocessor":
        """Use a fitted clusterer; the SOI is drawn from the retrieved candidates."""
        return cls(clusterer=clusterer, embed_model=embed_model, **kwargs)

    # ----------------------------------------------------------------- vectors
    def _query_vector(self, query_bundle: QueryBundle) -> np.ndarray:
        if query_bundle.embedding is not None:
            return as_vector(query_bundle.embedding)
        if self._embed_model is None:
            raise ValueError("The query has no embedding and no embed_model was given to embed it.")
        return as_vector(self._embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs))

    def _node_vectors(self, nodes: List[NodeWithScore]) -> np.ndarray:
        """Unit vectors of the candidates: stored (context), their own, or embedded now."""
        stored = self._ctx.unit_vectors([n.node.node_id for n in nodes]) if self._ctx is not None else [None] * len(nodes)
        out: list[np.ndarray | None] = []
        for n, vec in zip(nodes, stored):
            if vec is None and n.node.embedding is not None:
                vec = l2_normalize(np.asarray(n.node.embedding, dtype=np.float32))
            out.append(vec)
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            if self._embed_model is None:
                raise ValueError(
                    f"Node {nodes[missing[0]].node.node_id!r} has no embedding and no embed_model was given."
                )
            texts = [nodes[i].node.get_content(MetadataMode.EMBED) for i in missing]
            for i, vec in zip(missing, self._embed_model.get_text_embedding_batch(texts)):
                out[i] = l2_normalize(np.asarray(vec, dtype=np.float32))
        return np.vstack(out).astype(np.float32) if out else np.zeros((0, 0), np.float32)

    def _clusters(self, nodes: List[NodeWithScore], unit: np.ndarray) -> list[int | None]:
        """Cluster of each candidate: stored (context) or predicted (clusterer)."""
        if self._ctx is not None:
            return self._ctx.clusters_of([n.node.node_id for n in nodes])
        assert self._clusterer is not None
        return [int(c) for c in self._clusterer.predict(unit)]

    def _soi(
        self, q: np.ndarray, query_str: str, nodes: List[NodeWithScore], unit: np.ndarray, labels: list[int | None]
    ) -> SubsetOfInterest:
        ctx = self._ctx
        if ctx is not None:
            r = self._retriever
            return ctx.build_soi(
                as_vector(q, dim=ctx.dim_), self.delta, claim=query_str, include_texts=False,
                top_m=None if r is None else r.soi_top_m, n_related_claims=0 if r is None else r.soi_claims,
            )
        assert self._clusterer is not None
        q_unit = l2_normalize(as_vector(q, dim=self._clusterer.n_features_in_))
        query_cluster = int(self._clusterer.predict(q_unit[None, :])[0])
        rows = np.flatnonzero(np.asarray(labels) == query_cluster)
        members = ClusterMembers(
            [nodes[r].node.node_id for r in rows],
            [nodes[r].node.get_content(MetadataMode.NONE) for r in rows],
            unit[rows],
            np.zeros(len(rows), dtype=bool),
            [None] * len(rows),
        )
        return build_unsupervised_soi(q, members, self.delta, claim=query_str, cluster=query_cluster)

    # ------------------------------------------------------------- postprocess
    async def apostprocess_nodes(
        self,
        nodes: List[NodeWithScore],
        query_bundle: Optional[QueryBundle] = None,
        query_str: Optional[str] = None,
    ) -> List[NodeWithScore]:
        """Async variant: the embedding and vector maths run in a worker thread, off the event loop."""
        import asyncio

        return await asyncio.to_thread(self.postprocess_nodes, nodes, query_bundle, query_str)

    def _postprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("ThematicContextPostprocessor needs the query (query_bundle).")
        if not nodes:
            return []
        q = self._query_vector(query_bundle)
        unit = self._node_vectors(nodes)
        if unit.shape[1] != q.shape[0]:
            raise ValueError(f"Node vectors have dimension {unit.shape[1]} but the query has {q.shape[0]}.")
        labels = self._clusters(nodes, unit)
        soi = self._soi(q, query_bundle.query_str, nodes, unit, labels)
        q_unit = l2_normalize(q)
        claim_sims = unit @ q_unit
        t = soi.thematic_embedding
        theme_sims = None if t is None else unit @ l2_normalize(t)
        scores = claim_sims if theme_sims is None else self.alpha * claim_sims + (1 - self.alpha) * theme_sims
        order = np.argsort(-scores, kind="stable")
        kinds = soi.kinds()
        out: list[NodeWithScore] = []
        for r in order:
            node = nodes[r].node
            t_sim = None if theme_sims is None else float(theme_sims[r])
            if self.thematic_cutoff is not None and t_sim is not None and t_sim < self.thematic_cutoff:
                continue
            info = {
                "mode": self._ctx.mode if self._ctx is not None else "unsupervised",
                "alpha": self.alpha,
                "delta": self.delta,
                "cluster": labels[r],
                "query_cluster": soi.cluster,
                "query_theme": soi.theme,
                "claim_id": soi.claim_id,
                "claim_similarity": float(claim_sims[r]),
                "thematic_similarity": t_sim,
                "in_soi": node.node_id in kinds,
                "soi_kind": kinds.get(node.node_id),
                "soi_size": len(soi),
                "fallback": t is None,
                "original_score": nodes[r].score,
                "postprocessor": True,
            }
            out.append(NodeWithScore(node=_with_carag_metadata(node, info), score=float(scores[r])))
            if self.top_n is not None and len(out) == self.top_n:
                break
        return out
