"""``ContextAwareRetriever``: CARAG and CARAG-u as a LlamaIndex retriever.

For a query (a claim) the retriever

1. embeds it with the index's embed model (once);
2. finds its thematic cluster and builds its Subset of Interest from the
   corpus embeddings stored at fit time (nothing is re-embedded per query);
3. averages the SOI items into the thematic embedding ``T``;
4. searches the index's vector store with ``alpha * q + (1 - alpha) * T``;
5. returns the top-k evidence nodes, each a copy carrying
   ``metadata["carag"]`` — the provenance of its selection.

``alpha=1`` is plain RAG and returns exactly what
``index.as_retriever(similarity_top_k=k)`` returns.  An empty SOI falls back to
the claim vector and says so (``fallback=True``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Literal, Sequence

import llama_index.core.instrumentation as instrument
import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_carag._validation import (
    check_alpha,
    check_delta,
    check_n_clusters,
    check_query_text,
    check_top_k,
    check_unit_interval,
    sanitize_text,
)
from llama_index_carag.context import MODES, CorpusItems, SOIQuery, ThematicContext
from llama_index_carag.contrast import ClaimContrast
from llama_index_carag.datasets import CLAIM_KEY, LABEL_METADATA_KEYS, THEME_KEY
from llama_index_carag.models import embed_model_name
from llama_index_carag.persistence import StateError, ids_checksum, load_state, save_state
from llama_index_carag.soi import SubsetOfInterest
from llama_index_carag.stores import faiss_metric, get_node_embeddings, vector_store_kind
from llama_index_carag.vectors import as_matrix, as_vector, blend_query, l2_normalize

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding

logger = logging.getLogger(__name__)
dispatcher = instrument.get_dispatcher(__name__)

__all__ = ["ContextAwareRetriever", "CARAG_METADATA_KEY", "STATE_SUBDIR", "PAPER_SETTINGS", "TUNED_SETTINGS"]

#: Key of the provenance dict attached to every returned node.
CARAG_METADATA_KEY = "carag"
#: Sub-folder of a persist dir that holds the retriever's state.
STATE_SUBDIR = "carag"
#: With ``dedupe``, fetch this many times k so that k distinct texts usually remain.
_DEDUPE_OVERFETCH = 4

#: The papers' settings, which are also the defaults of :meth:`ContextAwareRetriever.from_index`.
PAPER_SETTINGS: dict[str, Any] = {"alpha": 0.5, "delta": 0.75, "n_clusters": 10, "similarity_top_k": 6}

#: The CARAG-u variant chosen on FactVer's tuning half (both encoders, fixed rule; see
#: docs/RESULTS.md): re-rank the claim's 50 nearest passages with its SOI (one related claim
#: added) and push down passages that sit closer to another corpus claim (``claim_contrast``).
#: It does not meet the "beat RAG by 2 points" target there either; pass ``**TUNED_SETTINGS``
#: to :meth:`ContextAwareRetriever.from_index` (or ``carag index --preset tuned``) to use it.
TUNED_SETTINGS: dict[str, Any] = {
    "alpha": 0.8,
    "rerank_candidates": 50,
    "soi_claims": 1,
    "claim_contrast": 0.1,
    "contrast_threshold": 0.8,
}


@dataclass
class _Plan:
    """Everything decided for one query before the vector-store search."""

    query_str: str
    query_vector: np.ndarray
    soi: SOIQuery
    search_embedding: list[float]
    fallback: bool
    rerank: bool = False


def _with_carag_metadata(node: BaseNode, info: dict[str, Any]) -> BaseNode:
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


def _warn_on_embedded_labels(nodes: Sequence[BaseNode], keys: Sequence[str]) -> None:
    """Warn (once) when annotation keys are embedded with the text or shown to the LLM."""
    for node in nodes:
        leaked = [k for k in keys if k in node.metadata and k not in node.excluded_embed_metadata_keys]
        if leaked:
            logger.warning(
                "Node %r embeds its metadata key(s) %s with its text; the embeddings (and so "
                "CARAG-u and every metric) can see these labels. Add them to "
                "excluded_embed_metadata_keys (llama_index_carag.datasets loaders do).",
                node.node_id,
                ", ".join(leaked),
            )
            return
        shown = [k for k in keys if k in node.metadata and k not in node.excluded_llm_metadata_keys]
        if shown:
            logger.warning(
                "Node %r shows its metadata key(s) %s to the LLM; FactCheckSynthesizer hides them, other "
                "synthesizers will not. Add them to excluded_llm_metadata_keys.",
                node.node_id,
                ", ".join(shown),
            )
            return


class ContextAwareRetriever(BaseRetriever):
    """Context-aware evidence retriever (CARAG / CARAG-u) over a ``VectorStoreIndex``.

    Build it with :meth:`from_index` (or :meth:`from_defaults` from nodes), use
    it wherever a LlamaIndex retriever goes, and save it with :meth:`persist`.

    Args:
        index: the vector index holding the evidence.
        context: the fitted :class:`ThematicContext` of the corpus.
        alpha: weight of the claim in the query, ``[0, 1]`` (1 = plain RAG).
        delta: SOI cosine threshold, ``[-1, 1]``.
        similarity_top_k: evidence passages returned.
        soi_top_m: keep at most this many SOI items, the most similar to the
            claim (``None``: every item above ``delta``, as in the papers).
        rerank_candidates: ``None`` (papers): search with the blended vector.
            An integer ``n``: search with the claim vector for ``n`` candidates and
            re-rank them by ``alpha * sim(q, n) + (1 - alpha) * sim(T, n)``, so the
            thematic context reorders the claim's neighbourhood instead of moving
            the query away from it.
        dedupe: return at most one passage per distinct text (case and spacing
            ignored).  FactVer annotates the same passage for several claims, so
            2.2 of plain RAG's top 6 are copies on average; off by default so
            ``alpha=1`` stays identical to the plain retriever.
        soi_claims: (unsupervised) also put the ``n`` claims of the claim's cluster
            most similar to it into the SOI (``related_claims``), so that earlier
            claims on the same topic shape ``T``; ``0`` is the paper's CARAG-u.
        hub_penalty: ``lambda`` in the re-ranking score
            ``alpha * sim(q, n) + (1 - alpha) * sim(T, n) - lambda * r(n)``, where
            ``r(n)`` is the passage's hubness (mean cosine to its ``hub_k`` nearest
            evidence passages, :meth:`ThematicContext.compute_hubness`): generic
            passages that sit close to everything are pushed down.  Needs
            ``rerank_candidates``; ``0`` disables it.
        hub_k: neighbours used for the hubness.
        claim_contrast: ``beta`` in the re-ranking term ``- beta * c(n)``, where
            ``c(n)`` is the passage's cosine to the most similar *other* corpus
            claim (a claim whose cosine to the query is at most
            ``contrast_threshold``; the query itself and its near-paraphrases do
            not count).  Evidence in a fact-checking corpus is written for some
            claim; a passage that sits closer to another claim than to this one is
            probably that claim's evidence.  Uses the ``claim_nodes`` given at fit
            time and no labels.  Needs ``rerank_candidates``; ``0`` disables it.
        contrast_threshold: claims with cosine ``> contrast_threshold`` to the
            query are treated as the same claim (``[-1, 1]``).
        embed_model: embeds queries; default the index's own.
        exclude_ids: node ids never returned (the claims, when they are in the index).
        claim_vectors: ``(claim node ids, raw embeddings (m, d))`` of the clustered
            claims, kept so that :meth:`persist` can save them exactly.
        theme_key, claim_key: metadata keys for the theme and the claim link.
    """

    def __init__(
        self,
        index: "VectorStoreIndex",
        context: ThematicContext,
        *,
        alpha: float = 0.5,
        delta: float = 0.75,
        similarity_top_k: int = 6,
        soi_top_m: int | None = None,
        rerank_candidates: int | None = None,
        dedupe: bool = False,
        soi_claims: int = 0,
        hub_penalty: float = 0.0,
        hub_k: int = 20,
        claim_contrast: float = 0.0,
        contrast_threshold: float = 0.9,
        embed_model: "BaseEmbedding | None" = None,
        exclude_ids: Sequence[str] = (),
        claim_vectors: tuple[Sequence[str], np.ndarray] | None = None,
        theme_key: str = THEME_KEY,
        claim_key: str = CLAIM_KEY,
        callback_manager: CallbackManager | None = None,
        object_map: dict | None = None,
        verbose: bool = False,
    ) -> None:
        self._index = index
        self._context = context
        if claim_vectors is None:
            ids = context.claim_node_ids
            claim_vectors = (ids, np.array([context.unit_vector(i) for i in ids], np.float32).reshape(len(ids), context.dim_))
        self._claim_vectors = (list(claim_vectors[0]), np.asarray(claim_vectors[1], dtype=np.float32))
        self._claim_units = l2_normalize(self._claim_vectors[1]) if len(self._claim_vectors[0]) else None
        self._claim_contrast_table: ClaimContrast | None = None
        self._seen_size = self._store_size()
        self.alpha = alpha
        self.delta = delta
        self._embed_model = embed_model or index._embed_model  # noqa: SLF001 - the index's model
        self._exclude_ids = frozenset(exclude_ids)
        self.theme_key = theme_key
        self.claim_key = claim_key
        self._searcher = VectorIndexRetriever(index, similarity_top_k=1, embed_model=self._embed_model)
        self._pool_searcher = VectorIndexRetriever(index, similarity_top_k=1, embed_model=self._embed_model)
        self._rerank: int | None = None
        self._dedupe = bool(dedupe)
        self._hub_k = check_top_k(hub_k, "hub_k")
        self._hub_penalty = 0.0
        self.soi_claims = soi_claims
        self.similarity_top_k = similarity_top_k
        self.soi_top_m = soi_top_m
        self.rerank_candidates = rerank_candidates
        _check_rerank_for_penalties(hub_penalty, claim_contrast, rerank_candidates)
        self.hub_penalty = hub_penalty
        self.contrast_threshold = contrast_threshold
        self.claim_contrast = claim_contrast
        super().__init__(callback_manager=callback_manager, object_map=object_map, verbose=verbose)

    # -------------------------------------------------------------- settings
    @property
    def alpha(self) -> float:
        """Weight of the claim vector in the blended query (``[0, 1]``)."""
        return self._alpha

    @alpha.setter
    def alpha(self, value: float) -> None:
        self._alpha = check_alpha(value)

    @property
    def delta(self) -> float:
        """SOI threshold: items with cosine similarity ``> delta`` to the claim are kept."""
        return self._delta

    @delta.setter
    def delta(self, value: float) -> None:
        self._delta = check_delta(value)

    @property
    def similarity_top_k(self) -> int:
        """Number of evidence passages returned."""
        return self._top_k

    @similarity_top_k.setter
    def similarity_top_k(self, value: int) -> None:
        self._top_k = check_top_k(value)
        self._resize_searchers()

    def _resize_searchers(self) -> None:
        # Claims in the index are filtered out of the results: fetch a few spare hits (a second,
        # larger search happens only when too many of them were claims).
        factor = _DEDUPE_OVERFETCH if self._dedupe else 1
        base = self._top_k * factor
        self._searcher.similarity_top_k = base + min(len(self._exclude_ids), base + 10)
        pool = max(self._rerank or 0, self._top_k) * factor
        self._pool_searcher.similarity_top_k = pool + min(len(self._exclude_ids), pool + 10)

    def _exclude(self, node_ids: Iterable[str]) -> None:
        """Never return these ids (claims that are also in the index)."""
        new = set(node_ids) - self._exclude_ids
        if new:
            self._exclude_ids = frozenset(self._exclude_ids | new)
            self._resize_searchers()

    @property
    def soi_claims(self) -> int:
        """Related claims added to a CARAG-u SOI (0 = the paper's evidence-only SOI)."""
        return self._soi_claims

    @soi_claims.setter
    def soi_claims(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"soi_claims must be a non-negative integer; got {type(value).__name__} {value!r}.")
        if value < 0:
            raise ValueError(f"soi_claims must be a non-negative integer; got {value!r}.")
        self._soi_claims = value

    @property
    def hub_penalty(self) -> float:
        """Weight of the hubness penalty in re-ranking (0 = off)."""
        return self._hub_penalty

    @hub_penalty.setter
    def hub_penalty(self, value: float) -> None:
        value = check_unit_interval("hub_penalty", value)
        if value > 0:
            self._context.compute_hubness(self._hub_k)
        self._hub_penalty = value

    @property
    def claim_contrast(self) -> float:
        """Weight of the competing-claim term in re-ranking (0 = off)."""
        return self._claim_contrast

    @claim_contrast.setter
    def claim_contrast(self, value: float) -> None:
        value = check_unit_interval("claim_contrast", value)
        if value > 0 and self._claim_units is None:
            raise ValueError("claim_contrast needs the corpus's claims: fit with claim_nodes=[...].")
        if value > 0 and self._claim_contrast_table is None:
            self._tabulate_contrast()
        self._claim_contrast = value

    @property
    def contrast_threshold(self) -> float:
        """Claims more similar than this to the query count as the query itself in ``claim_contrast``."""
        return self._contrast_threshold

    @contrast_threshold.setter
    def contrast_threshold(self, value: float) -> None:
        self._contrast_threshold = check_delta(value, "contrast_threshold")

    @property
    def dedupe(self) -> bool:
        """Return at most one passage per distinct text."""
        return self._dedupe

    @dedupe.setter
    def dedupe(self, value: bool) -> None:
        self._dedupe = bool(value)
        self._resize_searchers()

    @property
    def soi_top_m(self) -> int | None:
        """At most this many SOI items (the most similar); ``None`` keeps all above ``delta``."""
        return self._soi_top_m

    @soi_top_m.setter
    def soi_top_m(self, value: int | None) -> None:
        self._soi_top_m = None if value is None else check_top_k(value, "soi_top_m")

    @property
    def rerank_candidates(self) -> int | None:
        """Candidates re-ranked with the thematic context (``None``: blend the query instead)."""
        return self._rerank

    @rerank_candidates.setter
    def rerank_candidates(self, value: int | None) -> None:
        self._rerank = None if value is None else check_top_k(value, "rerank_candidates")
        self._resize_searchers()

    @property
    def mode(self) -> str:
        """``"unsupervised"`` (CARAG-u) or ``"supervised"`` (CARAG)."""
        return self._context.mode

    @property
    def context(self) -> ThematicContext:
        """The fitted thematic context (clusters and SOI builder)."""
        return self._context

    @property
    def index(self) -> "VectorStoreIndex":
        return self._index

    @property
    def embed_model(self) -> "BaseEmbedding":
        return self._embed_model

    # --------------------------------------------------------------- building
    @classmethod
    def from_index(
        cls,
        index: "VectorStoreIndex",
        *,
        mode: Literal["unsupervised", "supervised"] = "unsupervised",
        alpha: float = 0.5,
        delta: float = 0.75,
        n_clusters: int | Literal["auto"] = 10,
        similarity_top_k: int = 6,
        soi_top_m: int | None = None,
        rerank_candidates: int | None = None,
        dedupe: bool = False,
        soi_claims: int = 0,
        hub_penalty: float = 0.0,
        hub_k: int = 20,
        claim_contrast: float = 0.0,
        contrast_threshold: float = 0.9,
        random_state: int | None = 0,
        claim_nodes: Sequence[BaseNode] | None = None,
        theme_key: str = THEME_KEY,
        claim_key: str = CLAIM_KEY,
        embed_model: "BaseEmbedding | None" = None,
        covariance_type: str = "diag",
        clusterer_params: dict[str, Any] | None = None,
        show_progress: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> "ContextAwareRetriever":
        """Fit the thematic clustering on an index's stored embeddings.

        Args:
            index: a ``VectorStoreIndex`` of evidence nodes (FAISS or simple store).
            mode: ``"unsupervised"`` (CARAG-u) clusters all claims and evidence
                and needs no labels; ``"supervised"`` (CARAG) clusters each theme
                (metadata ``theme_key``) and uses claim↔evidence links (``claim_key``).
            alpha, delta, similarity_top_k: see the class docstring (papers: 0.5, 0.75, 6).
            soi_top_m, rerank_candidates, dedupe, soi_claims, hub_penalty, hub_k,
            claim_contrast, contrast_threshold: the options described in the class docstring.
            n_clusters: clusters ``t`` (papers: 10), per theme in supervised mode, or ``"auto"`` (BIC).
            random_state: seed of the clustering.
            claim_nodes: the corpus's claims as ``TextNode``s with the same metadata
                keys; required in supervised mode, optional (clustered with the
                evidence) in unsupervised mode.  Embedded once with the index's
                model unless they carry embeddings.  If they are also in the
                index they are never returned as evidence.
            theme_key, claim_key: metadata keys of the theme and of the claim an
                evidence passage is annotated for.
            embed_model: query/claim embed model; default the index's.
            covariance_type: GMM covariance (see :class:`ThematicClusterer`).
            clusterer_params: more :class:`ThematicClusterer` arguments.
            show_progress: progress bars while embedding claims and clustering.

        Raises:
            ValueError / TypeError: invalid parameters, an empty index, nodes
                without embeddings, dimension mismatches, NaN vectors, or
                supervised mode with nodes lacking ``theme_key``.
        """
        if mode not in MODES:
            raise ValueError(f"mode must be 'unsupervised' or 'supervised'; got {mode!r}.")
        check_alpha(alpha)
        check_delta(delta)
        check_top_k(similarity_top_k)
        if soi_top_m is not None:
            check_top_k(soi_top_m, "soi_top_m")
        if rerank_candidates is not None:
            check_top_k(rerank_candidates, "rerank_candidates")
        check_unit_interval("hub_penalty", hub_penalty)
        check_top_k(hub_k, "hub_k")
        check_unit_interval("claim_contrast", claim_contrast)
        check_delta(contrast_threshold, "contrast_threshold")
        _check_rerank_for_penalties(hub_penalty, claim_contrast, rerank_candidates)
        if claim_contrast and not claim_nodes:
            raise ValueError("claim_contrast needs the corpus's claims: pass claim_nodes=[...].")
        if isinstance(soi_claims, bool) or not isinstance(soi_claims, int) or soi_claims < 0:
            raise ValueError(f"soi_claims must be a non-negative integer; got {soi_claims!r}.")
        n_clusters = check_n_clusters(n_clusters)
        embed_model = embed_model or index._embed_model  # noqa: SLF001
        claim_nodes = list(claim_nodes or [])
        if mode == "supervised" and not claim_nodes:
            raise ValueError("Supervised CARAG needs the corpus's claims: pass claim_nodes=[...].")

        from llama_index_carag.qdrant_context import QdrantThematicContext, is_qdrant_store

        if is_qdrant_store(index.vector_store):
            # Server-side: clusters go into the payloads; only a bounded sample of vectors is fetched.
            claim_vectors = _claim_embeddings(claim_nodes, embed_model, show_progress=show_progress)
            claim_ids = [n.node_id for n in claim_nodes]
            context: ThematicContext = QdrantThematicContext(
                mode,
                vector_store=index.vector_store,
                theme_key=theme_key,
                claim_key=claim_key,
                n_clusters=n_clusters,
                random_state=random_state,
                clusterer_params={"covariance_type": covariance_type, **(clusterer_params or {})},
            ).fit_store(
                CorpusItems(
                    ids=claim_ids,
                    vectors=claim_vectors,
                    is_claim=np.ones(len(claim_ids), dtype=bool),
                    claim_of=[str(n.metadata.get(claim_key) or n.node_id) for n in claim_nodes],
                    themes=[n.metadata.get(theme_key) for n in claim_nodes],
                    claim_texts={n.node_id: n.get_content(MetadataMode.NONE) for n in claim_nodes},
                ),
                show_progress=show_progress,
            )
            return cls(
                index, context, alpha=alpha, delta=delta, similarity_top_k=similarity_top_k, soi_top_m=soi_top_m,
                rerank_candidates=rerank_candidates, dedupe=dedupe, soi_claims=soi_claims, hub_penalty=hub_penalty,
                hub_k=hub_k, claim_contrast=claim_contrast, contrast_threshold=contrast_threshold,
                embed_model=embed_model, claim_vectors=(claim_ids, claim_vectors), theme_key=theme_key,
                exclude_ids=context.claims_in_collection_,  # type: ignore[attr-defined]
                claim_key=claim_key, callback_manager=callback_manager, verbose=verbose,
            )

        index_ids, index_vectors = get_node_embeddings(index, copy=False)
        if not index_ids:
            raise ValueError("The index is empty: add evidence nodes before fitting CARAG.")
        index_vectors = as_matrix(index_vectors, name="index embeddings")
        claim_ids = [n.node_id for n in claim_nodes]
        if len(set(claim_ids)) != len(claim_ids):
            raise ValueError("claim_nodes contain duplicated node ids.")
        claim_set = set(claim_ids)
        index_id_set = set(index_ids)
        if claim_set & index_id_set:
            evidence_rows = [r for r, node_id in enumerate(index_ids) if node_id not in claim_set]
            evidence_ids = [index_ids[r] for r in evidence_rows]
            evidence_vectors = index_vectors[evidence_rows]
        else:
            evidence_ids, evidence_vectors = index_ids, index_vectors
        if not evidence_ids:
            raise ValueError("The index holds no evidence nodes (only claims).")
        # Metadata is needed for every node only in supervised mode; CARAG-u reads a sample (label-leak check).
        wanted = evidence_ids if mode == "supervised" else evidence_ids[:1000]
        evidence_nodes = index.docstore.get_nodes(wanted, raise_error=False)
        missing = [i for i, n in zip(wanted, evidence_nodes) if n is None]
        if missing:
            raise ValueError(f"Node {missing[0]!r} is in the vector store but not in the docstore.")
        _warn_on_embedded_labels(
            evidence_nodes[:1000] + claim_nodes[:1000], list(dict.fromkeys([theme_key, claim_key, *LABEL_METADATA_KEYS]))
        )

        claim_vectors = _claim_embeddings(claim_nodes, embed_model, show_progress=show_progress)
        if claim_vectors.shape[0] and claim_vectors.shape[1] != evidence_vectors.shape[1]:
            raise ValueError(
                f"Claim embeddings have dimension {claim_vectors.shape[1]} but the index's have "
                f"{evidence_vectors.shape[1]}: the embed model differs from the one that built the index."
            )

        def meta(node: BaseNode, key: str) -> str | None:
            value = node.metadata.get(key)
            return None if value is None or str(value) == "" else str(value)

        claim_identity = [meta(n, claim_key) or n.node_id for n in claim_nodes]
        if mode == "supervised":
            evidence_claims = [meta(n, claim_key) for n in evidence_nodes]
            evidence_themes = [meta(n, theme_key) for n in evidence_nodes]
        else:  # CARAG-u uses no labels: none are read
            evidence_claims, evidence_themes = [None] * len(evidence_ids), [None] * len(evidence_ids)
        items = CorpusItems(
            ids=list(evidence_ids) + claim_ids,
            vectors=np.vstack([evidence_vectors, claim_vectors]) if claim_nodes else evidence_vectors,
            is_claim=np.array([False] * len(evidence_ids) + [True] * len(claim_ids)),
            claim_of=evidence_claims + claim_identity,
            themes=evidence_themes + [meta(n, theme_key) for n in claim_nodes],
            claim_texts={n.node_id: n.get_content(MetadataMode.NONE) for n in claim_nodes},
        )
        del index_vectors, evidence_vectors
        params = {"covariance_type": covariance_type, **(clusterer_params or {})}
        context = ThematicContext(
            mode,
            n_clusters=n_clusters,
            random_state=random_state,
            clusterer_params=params,
            text_lookup=_docstore_text_lookup(index),
        ).fit(items, show_progress=show_progress)
        return cls(
            index,
            context,
            alpha=alpha,
            delta=delta,
            similarity_top_k=similarity_top_k,
            soi_top_m=soi_top_m,
            rerank_candidates=rerank_candidates,
            dedupe=dedupe,
            soi_claims=soi_claims,
            hub_penalty=hub_penalty,
            hub_k=hub_k,
            claim_contrast=claim_contrast,
            contrast_threshold=contrast_threshold,
            embed_model=embed_model,
            exclude_ids=[i for i in claim_ids if i in index_id_set],
            claim_vectors=(claim_ids, claim_vectors),
            theme_key=theme_key,
            claim_key=claim_key,
            callback_manager=callback_manager,
            verbose=verbose,
        )

    @classmethod
    def from_defaults(
        cls,
        nodes: Sequence[BaseNode],
        *,
        claim_nodes: Sequence[BaseNode] | None = None,
        embed_model: "str | BaseEmbedding | None" = "minilm",
        id_map: bool = False,
        show_progress: bool = False,
        **kwargs: Any,
    ) -> "ContextAwareRetriever":
        """Embed ``nodes`` into a new FAISS ``IndexFlatIP`` index and fit on it.

        Args:
            nodes: evidence nodes.
            claim_nodes: the claims (see :meth:`from_index`).
            embed_model: ``"minilm"`` (offline default), ``"mpnet"``, a hub id/path,
                or a :class:`BaseEmbedding`.
            id_map: use a delete-capable ``FaissMapVectorStore``.
            **kwargs: passed to :meth:`from_index`.
        """
        from llama_index_carag.indexing import build_faiss_index
        from llama_index_carag.models import resolve_embed_model

        model = resolve_embed_model(embed_model)
        index = build_faiss_index(nodes, model, id_map=id_map, show_progress=show_progress)
        return cls.from_index(index, claim_nodes=claim_nodes, embed_model=model, show_progress=show_progress, **kwargs)

    # ---------------------------------------------------------------- queries
    def _query_embedding(self, query_bundle: QueryBundle) -> list[float]:
        if query_bundle.embedding is not None:
            return list(query_bundle.embedding)
        return self._embed_model.get_agg_embedding_from_queries(_embedding_strs(query_bundle))

    async def _aquery_embedding(self, query_bundle: QueryBundle) -> list[float]:
        if query_bundle.embedding is not None:
            return list(query_bundle.embedding)
        return await self._embed_model.aget_agg_embedding_from_queries(_embedding_strs(query_bundle))

    def _plan(self, query_str: str, embedding: list[float], claim_id: str | None = None, *, include_texts: bool = False) -> _Plan:
        q = as_vector(embedding, dim=self._context.dim_)
        if not np.any(q):
            raise ValueError("The query embedding is all zeros; cannot compute similarities.")
        soi = self._context.query_soi(
            q, self._delta, claim=query_str, claim_id=claim_id, top_m=self._soi_top_m,
            n_related_claims=self._soi_claims, include_texts=include_texts,
        )
        theme = soi.core.thematic_embedding
        _check_rerank_for_penalties(self._hub_penalty, self._claim_contrast, self._rerank)
        penalties = self._hub_penalty > 0 or self._claim_contrast > 0
        if self._alpha >= 1.0 and not penalties:
            return _Plan(query_str, q, soi, list(embedding), fallback=theme is None)  # exactly plain RAG's vector
        if self._rerank is not None and (theme is not None or penalties):
            return _Plan(query_str, q, soi, list(embedding), fallback=theme is None, rerank=True)
        if theme is None:
            return _Plan(query_str, q, soi, list(embedding), fallback=True)
        return _Plan(query_str, q, soi, blend_query(q, theme, self._alpha).tolist(), fallback=False)

    def _search(self, plan: _Plan) -> list[NodeWithScore]:
        # The inner retriever's _retrieve, not retrieve: one retrieval event per query (ours), not two.
        searcher = self._pool_searcher if plan.rerank else self._searcher
        bundle = QueryBundle(query_str=plan.query_str, embedding=plan.search_embedding)
        results = searcher._retrieve(bundle)  # noqa: SLF001
        factor = _DEDUPE_OVERFETCH if self._dedupe else 1
        wanted = (max(self._rerank or 0, self._top_k) if plan.rerank else self._top_k) * factor
        kept = sum(r.node.node_id not in self._exclude_ids for r in results)
        if kept < wanted and len(results) == searcher.similarity_top_k:
            # Too many claims among the hits: search again with room for all of them.
            wider = VectorIndexRetriever(
                self._index, similarity_top_k=wanted + len(self._exclude_ids), embed_model=self._embed_model
            )
            results = wider._retrieve(bundle)  # noqa: SLF001
        return results

    def _annotate(self, results: list[NodeWithScore], plan: _Plan) -> list[NodeWithScore]:
        soi = plan.soi
        q_unit = l2_normalize(plan.query_vector)
        theme = soi.core.thematic_embedding
        t_unit = None if theme is None else l2_normalize(theme)
        kinds = soi.kinds()
        soi_size = len(soi.core)
        kept = [r for r in results if r.node.node_id not in self._exclude_ids]
        kept_ids = [r.node.node_id for r in kept]
        vectors, clusters = self._context.vectors_and_clusters(kept_ids)
        for i, result in enumerate(kept):
            if vectors[i] is None and result.node.embedding is not None:
                vectors[i] = l2_normalize(np.asarray(result.node.embedding, dtype=np.float32))
        scores = [r.score for r in kept]
        if plan.rerank:
            scores = []
            contrast = None
            if self._claim_contrast > 0 and self._claim_contrast_table is not None:
                contrast = self._claim_contrast_table.scores(kept_ids, vectors, q_unit, self._contrast_threshold)
            for i, (r, v) in enumerate(zip(kept, vectors)):
                if v is None:
                    scores.append(None)
                    continue
                score = float(v @ q_unit) if t_unit is None else float(
                    self._alpha * (v @ q_unit) + (1.0 - self._alpha) * (v @ t_unit)
                )
                if self._hub_penalty > 0:
                    score -= self._hub_penalty * (self._context.hubness(r.node.node_id) or 0.0)
                if contrast is not None:
                    score -= self._claim_contrast * float(contrast[i])
                scores.append(score)
            order = sorted(range(len(kept)), key=lambda i: -(scores[i] if scores[i] is not None else -np.inf))
            kept, vectors, scores = [kept[i] for i in order], [vectors[i] for i in order], [scores[i] for i in order]
            clusters = [clusters[i] for i in order]
        out: list[NodeWithScore] = []
        seen_texts: set[str] = set()
        for result, vector, score, cluster in zip(kept, vectors, scores, clusters):
            node = result.node
            if self._dedupe:
                key = " ".join(node.get_content(MetadataMode.NONE).split()).casefold()
                if key in seen_texts:
                    continue
                seen_texts.add(key)
            info = {
                "mode": self.mode,
                "alpha": self._alpha,
                "delta": self._delta,
                "cluster": cluster,
                "query_cluster": soi.key[1],
                "query_theme": soi.key[0],
                "claim_id": soi.claim_id,
                "claim_similarity": None if vector is None else float(vector @ q_unit),
                "thematic_similarity": None if (vector is None or t_unit is None) else float(vector @ t_unit),
                "in_soi": node.node_id in kinds,
                "soi_kind": kinds.get(node.node_id),
                "soi_size": soi_size,
                "fallback": plan.fallback,
                "reranked": plan.rerank,
            }
            out.append(NodeWithScore(node=_with_carag_metadata(node, info), score=score))
            if len(out) == self._top_k:
                break
        if self._verbose:
            logger.info(
                "CARAG query %r: cluster %s, SOI %d items%s, %d nodes",
                plan.query_str[:80],
                soi.key[1],
                soi_size,
                " (fallback to claim vector)" if plan.fallback else "",
                len(out),
            )
        return out

    @dispatcher.span
    def build_soi(self, query: str | QueryBundle, *, claim_id: str | None = None) -> SubsetOfInterest:
        """The Subset of Interest of a claim (embeds it with the index's model).

        Args:
            query: the claim text or a ``QueryBundle`` (its ``embedding`` is used if set).
            claim_id: mark the query as this corpus claim (else found by exact text match).
        """
        bundle = QueryBundle(query_str=query) if isinstance(query, str) else query
        if not isinstance(bundle, QueryBundle):
            raise TypeError(f"query must be a string or a QueryBundle; got {type(query).__name__}.")
        check_query_text(bundle.query_str)
        q = as_vector(self._query_embedding(bundle), dim=self._context.dim_)
        if not np.any(q):
            raise ValueError("The query embedding is all zeros; cannot compute similarities.")
        return self._context.build_soi(
            q, self._delta, claim=bundle.query_str, claim_id=claim_id, top_m=self._soi_top_m,
            n_related_claims=self._soi_claims, include_texts=True,
        )

    @dispatcher.span
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        _check_bundle(query_bundle)
        self._maybe_sync()
        plan = self._plan(query_bundle.query_str, self._query_embedding(query_bundle))
        return self._annotate(self._search(plan), plan)

    @dispatcher.span
    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        _check_bundle(query_bundle)
        await asyncio.to_thread(self._maybe_sync)
        embedding = await self._aquery_embedding(query_bundle)
        plan = await asyncio.to_thread(self._plan, query_bundle.query_str, embedding)
        store = self._index.vector_store
        if not _has_native_async(store):
            # The store has no native async search (FAISS, simple): run it off the event loop.
            results = await asyncio.to_thread(self._search, plan)
        else:
            searcher = self._pool_searcher if plan.rerank else self._searcher
            results = await searcher._aretrieve(  # noqa: SLF001
                QueryBundle(query_str=plan.query_str, embedding=plan.search_embedding)
            )
        return await asyncio.to_thread(self._annotate, results, plan)

    # ----------------------------------------------------- incremental updates
    def _store_size(self) -> int | None:
        """Cheap change signal: the number of vectors in the store (``None`` if unknown)."""
        kind = vector_store_kind(self._index)
        store: Any = self._index.vector_store
        if kind == "faiss_map":
            return len(store._node_id_to_faiss_id_map)  # noqa: SLF001
        if kind == "faiss":
            return int(store.client.ntotal)
        if kind == "simple":
            return len(store.data.embedding_dict)
        return None

    def _evidence_items(self, node_ids: Sequence[str]) -> CorpusItems:
        ids, vectors = get_node_embeddings(self._index, list(node_ids))
        nodes = self._nodes_by_id(ids)
        supervised = self.mode == "supervised"

        def meta(node: BaseNode | None, key: str) -> str | None:
            value = None if node is None else node.metadata.get(key)
            return None if value is None or str(value) == "" else str(value)

        return CorpusItems(
            ids=ids,
            vectors=vectors,
            is_claim=np.zeros(len(ids), dtype=bool),
            claim_of=[meta(n, self.claim_key) if supervised else None for n in nodes],
            themes=[meta(n, self.theme_key) if supervised else None for n in nodes],
        )

    def _nodes_by_id(self, ids: Sequence[str]) -> list[BaseNode | None]:
        """Nodes from the docstore, or from the vector store when it keeps the text (Qdrant)."""
        found = {n.node_id: n for n in self._index.docstore.get_nodes(list(ids), raise_error=False) if n is not None}
        missing = [i for i in ids if i not in found]
        if missing and self._index.vector_store.stores_text:
            try:
                found.update({n.node_id: n for n in self._index.vector_store.get_nodes(node_ids=missing)})
            except (NotImplementedError, ValueError):
                pass
        return [found.get(i) for i in ids]

    def insert_nodes(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> None:
        """Insert evidence into the index *and* the thematic context, without refitting.

        Each node is embedded by the index, gets its cluster from the fitted
        mixture (supervised: its theme's, or the nearest theme's) and takes part
        in SOIs at once.  A node id that already exists is replaced, not duplicated.
        """
        nodes = list(nodes)
        if not nodes:
            return
        ids = [n.node_id for n in nodes]
        if len(set(ids)) != len(ids):
            raise ValueError("insert_nodes: duplicated node ids in the batch.")
        _warn_on_embedded_labels(nodes, LABEL_METADATA_KEYS)
        claims = set(self._claim_vectors[0])
        existing = [i for i in ids if i in self._context and i not in claims]
        if existing:
            self.delete_nodes(existing)
        self._index.insert_nodes(nodes, **insert_kwargs)
        self._forget_contrast(ids)
        self._exclude([i for i in ids if i in claims])  # a claim put into the index is never evidence
        evidence = [i for i in ids if i not in claims]
        if evidence:
            self._context.add_items(self._evidence_items(evidence))
        self._seen_size = self._store_size()

    def delete_nodes(self, node_ids: Sequence[str], **delete_kwargs: Any) -> None:
        """Delete evidence from the index and from every SOI.

        Needs a vector store that can delete (``FaissMapVectorStore``,
        ``SimpleVectorStore``, …; the plain ``FaissVectorStore`` cannot).
        """
        ids = [i for i in node_ids if i not in self._exclude_ids]
        if not ids:
            return
        try:
            self._index.delete_nodes(ids, delete_from_docstore=True, **delete_kwargs)
        except NotImplementedError:
            raise ValueError(
                f"{type(self._index.vector_store).__name__} cannot delete nodes; build the index with an "
                "id-mapped FAISS index (build_faiss_index(..., id_map=True) / FaissMapVectorStore)."
            ) from None
        self._context.remove_items(ids)
        self._forget_contrast(ids)
        self._seen_size = self._store_size()

    def sync(self) -> tuple[int, int]:
        """Bring the thematic context in line with nodes inserted into or deleted from the index directly.

        Queries call it by themselves when the vector store's size changed since the last
        fit or sync (FAISS and the simple store; not Qdrant).  An insert and a delete of the
        same number of nodes leave the size unchanged: call ``sync()`` after such edits, or
        edit through :meth:`insert_nodes` / :meth:`delete_nodes`.

        Returns:
            ``(added, removed)``.
        """
        from llama_index_carag.stores import index_node_ids

        claims = set(self._claim_vectors[0])
        all_ids = index_node_ids(self._index)
        self._exclude([i for i in all_ids if i in claims])  # claims put into the index directly
        current = [i for i in all_ids if i not in self._exclude_ids]
        current_set = set(current)
        known = {i for i, _ in self._context.iter_items() if i not in claims}
        gone = [i for i in known if i not in current_set]
        removed = self._context.remove_items(gone)
        added = [i for i in current if i not in known]
        self._forget_contrast(gone + added)
        if added:
            self._context.add_items(self._evidence_items(added))
        self._seen_size = self._store_size()
        return len(added), removed

    def _tabulate_contrast(self) -> None:
        """Build the nearest-claim table of every evidence passage the context holds (fit-time work)."""
        self._claim_contrast_table = ClaimContrast(self._claim_units).fit(*self._context.evidence_units())

    def _forget_contrast(self, node_ids: Sequence[str]) -> None:
        """Changed or deleted passages leave the claim-contrast table (computed exactly if seen again)."""
        if self._claim_contrast_table is not None:
            self._claim_contrast_table.forget(node_ids)

    def _maybe_sync(self) -> None:
        size = self._store_size()
        if size is not None and size != getattr(self, "_seen_size", size):
            with self._context._lock:  # noqa: SLF001
                if self._store_size() != self._seen_size:
                    logger.info("The index changed since the last fit/sync; syncing the thematic context.")
                    self.sync()

    def refit(self, *, show_progress: bool = False) -> "ContextAwareRetriever":
        """Refit the clustering on the index as it is now (same settings and claims); in place."""
        from llama_index.core.schema import TextNode

        ids, vectors = self._claim_vectors
        identity = {node: claim for claim, node in self._context._claim_node_of.items()}  # noqa: SLF001
        claims = []
        for node_id, vector in zip(ids, vectors):
            metadata: dict[str, Any] = {self.claim_key: identity.get(node_id, node_id)}
            theme = self._context.theme_of(node_id)
            if theme is not None:
                metadata[self.theme_key] = theme
            text = self._context._claim_texts.get(node_id, "")  # noqa: SLF001
            keys = list(metadata)
            claims.append(
                TextNode(
                    id_=node_id, text=text, metadata=metadata, embedding=vector.tolist(),
                    excluded_embed_metadata_keys=keys, excluded_llm_metadata_keys=keys,
                )
            )
        fresh = ContextAwareRetriever.from_index(
            self._index,
            mode=self.mode,  # type: ignore[arg-type]
            claim_nodes=claims or None,
            n_clusters=self._context.n_clusters,
            random_state=self._context.random_state,
            theme_key=self.theme_key,
            claim_key=self.claim_key,
            embed_model=self._embed_model,
            clusterer_params=self._context.clusterer_params,
            show_progress=show_progress,
        )
        self._context = fresh._context
        if self._hub_penalty > 0:
            self._context.compute_hubness(self._hub_k)
        if self._claim_contrast_table is not None:  # re-tabulate, inserted passages included
            self._tabulate_contrast()
        self._seen_size = self._store_size()
        return self

    # ------------------------------------------------------------ persistence
    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        ctx_info, ctx_arrays = self._context.get_state()
        claim_ids, claim_vectors = self._claim_vectors
        claim_set = set(claim_ids)
        evidence_ids = [i for i, _ in self._context.iter_items() if i not in claim_set]
        info = {
            "settings": {
                "alpha": self._alpha,
                "delta": self._delta,
                "similarity_top_k": self._top_k,
                "soi_top_m": self._soi_top_m,
                "rerank_candidates": self._rerank,
                "dedupe": self._dedupe,
                "soi_claims": self._soi_claims,
                "hub_penalty": self._hub_penalty,
                "hub_k": self._hub_k,
                "claim_contrast": self._claim_contrast,
                "contrast_threshold": self._contrast_threshold,
                "theme_key": self.theme_key,
                "claim_key": self.claim_key,
                "exclude_ids": sorted(self._exclude_ids),
            },
            "embed_model": embed_model_name(self._embed_model),
            "dim": self._context.dim_,
            "vector_store": vector_store_kind(self._index),
            "faiss_metric": faiss_metric(self._index),
            "evidence_ids_sha256": ids_checksum(evidence_ids),
            "n_evidence": len(evidence_ids),
            "claim_ids": list(claim_ids),
            "context": ctx_info,
        }
        arrays = {"claim_vectors": np.asarray(claim_vectors, dtype=np.float32), **ctx_arrays}
        return info, arrays

    def persist(self, persist_dir: str | os.PathLike[str], *, persist_index: bool = False) -> Path:
        """Save the fitted clustering and settings under ``persist_dir/carag/``.

        The state is JSON plus ``.npy`` arrays (no pickle), written atomically.
        Evidence embeddings are not duplicated: they are read back from the index.

        Args:
            persist_dir: folder (typically the index's own persist dir).
            persist_index: also call ``index.storage_context.persist(persist_dir)``.

        Returns:
            the state folder.
        """
        folder = Path(persist_dir)
        self._maybe_sync()  # nodes added to the index directly must be in the saved state too
        if persist_index:
            self._index.storage_context.persist(persist_dir=str(folder))
        info, arrays = self._state()
        save_state(folder / STATE_SUBDIR, info, arrays)
        return folder / STATE_SUBDIR

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | os.PathLike[str],
        *,
        index: "VectorStoreIndex | None" = None,
        embed_model: "str | BaseEmbedding | None" = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> "ContextAwareRetriever":
        """Reload a retriever saved with :meth:`persist`.

        Args:
            persist_dir: the folder given to :meth:`persist`.
            index: the index it was fitted on; loaded from ``persist_dir`` when ``None``
                (FAISS indexes saved with ``persist_index=True``).
            embed_model: the query embed model; default the index's, or (when the
                index is loaded here) the recorded model resolved offline.

        Raises:
            StateError: no state, a corrupt/tampered file, or a state that does not
                match the index (other nodes, other embed model or dimension).
        """
        from llama_index_carag.models import resolve_embed_model

        folder = Path(persist_dir)
        info, arrays = load_state(folder / STATE_SUBDIR)
        try:
            settings = info["settings"]
            recorded_model = info["embed_model"]
            dim = int(info["dim"])
        except (KeyError, TypeError, ValueError):
            raise StateError(f"{folder / STATE_SUBDIR} lacks settings; the state is corrupt.") from None
        if index is None:
            from llama_index_carag.indexing import load_persisted_index

            kind = info.get("vector_store")
            if kind not in ("faiss", "faiss_map", "simple"):
                raise StateError(
                    f"The state was fitted on a {kind} index, which is not saved on disk; pass index=... to reload it."
                )
            model = resolve_embed_model(embed_model if embed_model is not None else recorded_model)
            index = load_persisted_index(folder, model, kind)
            embed_model = model
        elif embed_model is not None:
            embed_model = resolve_embed_model(embed_model)
        model = embed_model or index._embed_model  # noqa: SLF001
        if embed_model_name(model) != recorded_model:
            raise StateError(
                f"The state was fitted with embed model {recorded_model!r} but the index/query model is "
                f"{embed_model_name(model)!r}; reload with the same model."
            )
        claim_ids = [str(i) for i in info.get("claim_ids", [])]
        claim_vectors = arrays.get("claim_vectors", np.zeros((0, dim), np.float32))
        if claim_vectors.shape[0] != len(claim_ids):
            raise StateError("Saved claim vectors do not match the saved claim ids.")
        claim_lookup = {cid: claim_vectors[r] for r, cid in enumerate(claim_ids)}
        ctx_info = info["context"]
        evidence_ids = [
            str(i) for g in ctx_info["groups"] for i in g["ids"] if str(i) not in claim_lookup
        ]
        if ctx_info.get("backend") != "qdrant" and ids_checksum(evidence_ids) != info.get("evidence_ids_sha256"):
            raise StateError("The state's node list is inconsistent (checksum mismatch); it was modified.")
        try:
            from llama_index_carag.stores import index_node_ids

            current = [i for i in index_node_ids(index) if i not in claim_lookup]
        except ValueError as exc:
            raise StateError(str(exc)) from None
        if ids_checksum(current) != info.get("evidence_ids_sha256"):
            raise StateError(
                f"The index holds {len(current)} evidence nodes that differ from the {info.get('n_evidence')} "
                "the state was fitted on; refit (ContextAwareRetriever.from_index) or load the matching index."
            )

        def vectors(ids: list[str]) -> np.ndarray:
            out = np.empty((len(ids), dim), dtype=np.float32)
            ev = [(r, i) for r, i in enumerate(ids) if i not in claim_lookup]
            if ev:
                _, mat = get_node_embeddings(index, [i for _, i in ev])
                if mat.shape[1] != dim:
                    raise StateError(f"The index's vectors have dimension {mat.shape[1]}; the state expects {dim}.")
                out[[r for r, _ in ev]] = mat
            for r, i in enumerate(ids):
                if i in claim_lookup:
                    out[r] = claim_lookup[i]
            return out

        try:
            if ctx_info.get("backend") == "qdrant":
                from llama_index_carag.qdrant_context import QdrantThematicContext

                context = QdrantThematicContext.from_store_state(ctx_info, arrays, index.vector_store, vectors)
            else:
                context = ThematicContext.from_state(ctx_info, arrays, vectors, text_lookup=_docstore_text_lookup(index))
        except (KeyError, TypeError) as exc:
            raise StateError(f"The saved clustering state is incomplete ({exc}).") from None
        return cls(
            index,
            context,
            alpha=settings["alpha"],
            delta=settings["delta"],
            similarity_top_k=settings["similarity_top_k"],
            soi_top_m=settings.get("soi_top_m"),
            rerank_candidates=settings.get("rerank_candidates"),
            dedupe=bool(settings.get("dedupe", False)),
            soi_claims=int(settings.get("soi_claims", 0)),
            hub_penalty=float(settings.get("hub_penalty", 0.0)),
            hub_k=int(settings.get("hub_k", 20)),
            claim_contrast=float(settings.get("claim_contrast", 0.0)),
            contrast_threshold=float(settings.get("contrast_threshold", 0.9)),
            embed_model=model,
            exclude_ids=settings.get("exclude_ids", []),
            claim_vectors=(claim_ids, claim_vectors),
            theme_key=settings.get("theme_key", THEME_KEY),
            claim_key=settings.get("claim_key", CLAIM_KEY),
            callback_manager=callback_manager,
            verbose=verbose,
        )


def _check_rerank_for_penalties(hub_penalty: Any, claim_contrast: Any, rerank_candidates: int | None) -> None:
    """The re-ranking penalties act on the re-ranked candidates: refuse them without ``rerank_candidates``."""
    if rerank_candidates is None:
        for name, value in (("hub_penalty", hub_penalty), ("claim_contrast", claim_contrast)):
            if value:
                raise ValueError(f"{name} needs rerank_candidates (the candidates it re-ranks).")


def _has_native_async(store: Any) -> bool:
    """True when the store's async query is its own and can run (Qdrant needs an async client)."""
    if type(store).aquery is BasePydanticVectorStore.aquery:
        return False
    return getattr(store, "_aclient", True) is not None


def _embedding_strs(query_bundle: QueryBundle) -> list[str]:
    """The bundle's texts to embed, made safe for tokenizers (NULs, lone surrogates)."""
    strs = [sanitize_text(t) for t in query_bundle.embedding_strs]
    if not any(t.strip() for t in strs):
        raise ValueError("query is empty; give the claim to check.")
    return strs


def _check_bundle(query_bundle: Any) -> QueryBundle:
    if not isinstance(query_bundle, QueryBundle):
        raise TypeError(f"query must be a string or a QueryBundle; got {type(query_bundle).__name__}.")
    check_query_text(query_bundle.query_str)
    return query_bundle


def _claim_embeddings(claim_nodes: Sequence[BaseNode], embed_model: "BaseEmbedding", *, show_progress: bool) -> np.ndarray:
    """Embeddings of the claim nodes: their own when set, else embedded once with ``embed_model``."""
    if not claim_nodes:
        return np.zeros((0, 0), dtype=np.float32)
    todo = [n for n in claim_nodes if n.embedding is None]
    fresh: dict[str, list[float]] = {}
    if todo:
        texts = [n.get_content(MetadataMode.EMBED) for n in todo]
        vectors = embed_model.get_text_embedding_batch(texts, show_progress=show_progress)
        fresh = {n.node_id: v for n, v in zip(todo, vectors)}
    rows = [fresh[n.node_id] if n.embedding is None else n.embedding for n in claim_nodes]
    lengths = {len(r) for r in rows}
    if len(lengths) != 1:
        raise ValueError(f"Claim embeddings have inconsistent dimensions {sorted(lengths)}.")
    return as_matrix(rows, name="claim embeddings")


def _docstore_text_lookup(index: "VectorStoreIndex") -> Any:
    docstore = index.docstore

    def lookup(node_id: str) -> str:
        node = docstore.get_node(node_id, raise_error=False)
        return "" if node is None else node.get_content(MetadataMode.NONE)

    return lookup
