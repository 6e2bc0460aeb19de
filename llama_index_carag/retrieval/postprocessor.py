"""CARAG as a node postprocessor, for users who keep their own retriever.

:class:`ThematicContextPostprocessor` takes the nodes *any* retriever returned,
computes the query's Subset of Interest and thematic embedding ``T``, re-ranks
with the retriever's own :class:`~llama_index_carag.ranking.stage.RerankStage`
(``alpha * sim(q, n) + (1 - alpha) * sim(T, n)`` minus the penalties its
:class:`~llama_index_carag.settings.CaragSettings` turn on), optionally drops nodes whose
thematic similarity is below a cut-off, and attaches the same ``carag``
provenance the :class:`~llama_index_carag.retrieval.retriever.ContextAwareRetriever` does.

Two sources of thematic context:

* ``ThematicContextPostprocessor.from_retriever(retriever)`` reuses a fitted
  ``ContextAwareRetriever``: the SOI comes from the whole corpus, built with the
  retriever's current clustering (also after ``refit()``) and settings (hubness and
  claim contrast included), and node vectors are the stored ones.
* ``ThematicContextPostprocessor.from_clusterer(clusterer, embed_model)`` uses a
  fitted :class:`~llama_index_carag.core.clustering.ThematicClusterer` only: the
  candidates themselves are assigned to clusters and the SOI is the
  candidates of the query's cluster with similarity ``> delta`` (CARAG-u's rule
  on the retrieved pool).  Candidates without an embedding are embedded, one
  batch per query.  The penalties need fitted tables: use ``from_retriever`` for them.

The docstore is never modified: returned nodes are copies.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_validator
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_carag.core.clustering import ThematicClusterer
from llama_index_carag.core.context import ThematicContext
from llama_index_carag.core.soi import ClusterMembers, SubsetOfInterest, build_unsupervised_soi
from llama_index_carag.core.validation import check_delta
from llama_index_carag.core.vectors import as_vector, l2_normalize
from llama_index_carag.ranking.assembly import active_terms
from llama_index_carag.ranking.pool import CandidatePool, RankQuery
from llama_index_carag.ranking.stage import RerankStage
from llama_index_carag.settings import PAPER, CaragSettings

logger = logging.getLogger(__name__)


class ThematicContextPostprocessor(BaseNodePostprocessor):
    """Re-rank any retriever's nodes by claim and thematic similarity (CARAG as a postprocessor).

    Attributes:
        settings: the :class:`CaragSettings` (``alpha``, ``delta``, ``soi_top_m``,
            ``soi_claims``, ``hub_penalty``, ``claim_contrast``, …); any of their fields
            may also be given as a keyword (``alpha=0.7``).  Default: the retriever's
            (``from_retriever``) or the papers'.
        thematic_cutoff: drop nodes whose cosine similarity to ``T`` is below
            this (``None`` keeps all; ignored when the SOI is empty).
        top_n: keep at most this many nodes after re-ranking (``None``: all).
    """

    settings: CaragSettings = Field(default_factory=lambda: PAPER, description="CARAG options (frozen).")
    thematic_cutoff: float | None = Field(default=None, description="Minimum sim(T, n) to keep a node.")
    top_n: int | None = Field(default=None, description="Nodes kept after re-ranking.")

    _context: ThematicContext | None = PrivateAttr(default=None)
    _retriever: Any = PrivateAttr(default=None)
    _clusterer: ThematicClusterer | None = PrivateAttr(default=None)
    _embed_model: BaseEmbedding | None = PrivateAttr(default=None)

    @field_validator("thematic_cutoff")
    @classmethod
    def _check_cutoff(cls, v: float | None) -> float | None:
        return None if v is None else check_delta(v)

    @field_validator("top_n")
    @classmethod
    def _check_top_n(cls, v: int | None) -> int | None:
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
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in CaragSettings.model_fields}
        if options:
            kwargs["settings"] = CaragSettings.from_options(kwargs.get("settings") or PAPER, **options)
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
    def from_retriever(cls, retriever: Any, **kwargs: Any) -> ThematicContextPostprocessor:
        """Reuse a fitted ``ContextAwareRetriever``'s clustering, embed model, fitted tables and
        (by default) settings; keywords that name a settings field override it."""
        kwargs.setdefault("settings", retriever.settings)
        pp = cls(context=retriever.context, embed_model=retriever.embed_model, **kwargs)
        if pp.settings != retriever.settings:
            retriever = retriever.with_settings(pp.settings)  # fits the tables the new settings need
        pp._retriever = retriever  # follow its context through refit()
        return pp

    @property
    def alpha(self) -> float:
        """Weight of the claim similarity (``settings.alpha``)."""
        return self.settings.alpha

    @property
    def delta(self) -> float:
        """SOI threshold (``settings.delta``)."""
        return self.settings.delta

    @property
    def _ctx(self) -> ThematicContext | None:
        return self._retriever.context if self._retriever is not None else self._context

    def _stage(self) -> RerankStage:
        if self._retriever is not None:
            return self._retriever.stage
        terms = [term.weight_name for term in active_terms(self.settings)]
        if terms:
            raise ValueError(f"{' / '.join(terms)} need fitted tables: build with from_retriever(...).")
        return RerankStage(self.settings)

    @classmethod
    def from_clusterer(
        cls, clusterer: ThematicClusterer, embed_model: BaseEmbedding, **kwargs: Any
    ) -> ThematicContextPostprocessor:
        """Use a fitted clusterer; the SOI is drawn from the retrieved candidates."""
        return cls(clusterer=clusterer, embed_model=embed_model, **kwargs)

    # ----------------------------------------------------------------- vectors
    def _query_vector(self, query_bundle: QueryBundle) -> np.ndarray:
        if query_bundle.embedding is not None:
            return as_vector(query_bundle.embedding)
        if self._embed_model is None:
            raise ValueError("The query has no embedding and no embed_model was given to embed it.")
        return as_vector(self._embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs))

    def _node_vectors(self, nodes: list[NodeWithScore]) -> np.ndarray:
        """Unit vectors of the candidates: stored (context), their own, or embedded now."""
        stored = (
            self._ctx.unit_vectors([n.node.node_id for n in nodes]) if self._ctx is not None else [None] * len(nodes)
        )
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
            for i, emb in zip(missing, self._embed_model.get_text_embedding_batch(texts)):
                out[i] = l2_normalize(np.asarray(emb, dtype=np.float32))
        # every None was filled above (or the embed_model check raised)
        return np.vstack(cast("list[np.ndarray]", out)).astype(np.float32) if out else np.zeros((0, 0), np.float32)

    def _clusters(self, nodes: list[NodeWithScore], unit: np.ndarray) -> list[int | None]:
        """Cluster of each candidate: stored (context) or predicted (clusterer)."""
        if self._ctx is not None:
            return self._ctx.clusters_of([n.node.node_id for n in nodes])
        assert self._clusterer is not None
        return [int(c) for c in self._clusterer.predict(unit)]

    def _soi(
        self, q: np.ndarray, query_str: str, nodes: list[NodeWithScore], unit: np.ndarray, labels: list[int | None]
    ) -> SubsetOfInterest:
        ctx = self._ctx
        if ctx is not None:
            return ctx.build_soi(
                as_vector(q, dim=ctx.dim_),
                self.delta,
                claim=query_str,
                include_texts=False,
                top_m=self.settings.soi_top_m,
                min_size=self.settings.soi_min_size,
                n_related_claims=self.settings.soi_claims,
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
        return build_unsupervised_soi(
            q, members, self.delta, claim=query_str, cluster=query_cluster, min_size=self.settings.soi_min_size
        )

    # ------------------------------------------------------------- postprocess
    async def apostprocess_nodes(
        self,
        nodes: list[NodeWithScore],
        query_bundle: QueryBundle | None = None,
        query_str: str | None = None,
    ) -> list[NodeWithScore]:
        """Async variant: the embedding and vector maths run in a worker thread, off the event loop."""
        import asyncio

        return await asyncio.to_thread(self.postprocess_nodes, nodes, query_bundle, query_str)

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
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
        t = soi.thematic_embedding
        query = RankQuery(
            query_bundle.query_str,
            l2_normalize(q),
            None if t is None else l2_normalize(t),
            soi.kinds(),
            len(soi),
            soi.cluster,
            soi.theme,
            soi.claim_id,
            self._ctx.mode if self._ctx is not None else "unsupervised",
            soi.filled,
        )
        pool = CandidatePool(
            [n.node.node_id for n in nodes], unit, np.ones(len(nodes), dtype=bool), list(labels), list(nodes)
        )
        pool.columns["dense"] = pool.similarity(query.unit)
        cutoff = self.thematic_cutoff

        def keep(row: int, info: dict[str, Any]) -> bool:
            t_sim = info["thematic_similarity"]
            return cutoff is None or t_sim is None or t_sim >= cutoff

        def extra(row: int) -> dict[str, Any]:
            return {"original_score": nodes[row].score, "postprocessor": True}

        return self._stage().rank(pool, query, rerank=True, limit=self.top_n, extra=extra, keep=keep)
