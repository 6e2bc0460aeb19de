"""Fitting CARAG's corpus context: clusters, SOIs, claim table and fitted tables, from an index and claims.

:func:`fit_corpus` is the one place that fits a :class:`~llama_index_carag.retrieval.fitted_corpus.FittedCorpus`
— in memory (FAISS, the simple store, …) or through the store's cluster backend (Qdrant: clusters in the
payloads) — and its per-passage tables the settings' re-ranking terms need
(:meth:`~llama_index_carag.retrieval.fitted_corpus.FittedCorpus.fit_tables`).  ``ContextAwareRetriever.from_index``,
``refit()`` and ``with_settings()`` call them; no query and no property setter does fit-time work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_carag.core.context import CorpusItems, ThematicContext
from llama_index_carag.core.heap import release_free_memory
from llama_index_carag.core.persistence import StateError
from llama_index_carag.core.row_clusters import RowClusterStore
from llama_index_carag.core.store_rows import StackedRows, StoreRows
from llama_index_carag.core.vectors import as_matrix, growth_rows
from llama_index_carag.datasets import LABEL_METADATA_KEYS
from llama_index_carag.ranking.assembly import active_terms
from llama_index_carag.retrieval.fitted_corpus import FittedCorpus
from llama_index_carag.settings import CaragSettings
from llama_index_carag.stores.vector_stores import adapter_for, get_node_embeddings

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding

logger = logging.getLogger(__name__)


def fit_corpus(
    index: VectorStoreIndex,
    claim_nodes: Sequence[BaseNode] | None,
    settings: CaragSettings,
    *,
    embed_model: BaseEmbedding,
    theme_key: str,
    claim_key: str,
    clusterer_params: dict[str, Any] | None = None,
    show_progress: bool = False,
) -> FittedCorpus:
    """Cluster the index's stored embeddings (plus the claims) with ``settings``' clustering options.

    Raises:
        ValueError: an empty index, nodes without embeddings, dimension mismatches, NaN
            vectors, duplicated claim ids, or supervised mode without claims or themes.
    """
    claim_nodes = list(claim_nodes or [])
    if settings.mode == "supervised" and not claim_nodes:
        raise ValueError("Supervised CARAG needs the corpus's claims: pass claim_nodes=[...].")
    for term in active_terms(settings):
        if term.needs_claims and not claim_nodes:
            raise ValueError(f"{term.weight_name} needs the corpus's claims: pass claim_nodes=[...].")
    options: dict[str, Any] = dict(n_clusters=settings.n_clusters, random_state=settings.random_state)
    options["clusterer_params"] = {"covariance_type": settings.covariance_type, **(clusterer_params or {})}
    claim_ids = [n.node_id for n in claim_nodes]
    if len(set(claim_ids)) != len(claim_ids):
        raise ValueError("claim_nodes contain duplicated node ids.")

    backend = adapter_for(index).store_clustering()
    if backend is not None:
        # Server-side (Qdrant): clusters go into the store; only a bounded sample of vectors is fetched.
        claim_vectors = claim_embeddings(claim_nodes, embed_model, show_progress=show_progress)
        context, exclude = backend.fit_context(
            _claim_items(claim_nodes, claim_vectors, claim_key, theme_key),
            mode=settings.mode,
            theme_key=theme_key,
            claim_key=claim_key,
            show_progress=show_progress,
            **options,
        )
    else:
        items, buffer, claim_vectors, exclude = _memory_items(
            index, claim_nodes, settings.mode, embed_model, theme_key, claim_key, show_progress
        )
        context = ThematicContext(settings.mode, text_lookup=docstore_text_lookup(index), **options).fit(
            items,
            show_progress=show_progress,
            copy=False,  # items.vectors is ours: it becomes the store, with the rows after it as room to grow
            buffer=buffer,
        )
        del items
    corpus = FittedCorpus(
        index,
        context,
        claim_ids,
        claim_vectors.reshape(len(claim_ids), -1) if claim_ids else np.zeros((0, context.dim_), np.float32),
        frozenset(exclude),
        theme_key,
        claim_key,
        dict(clusterer_params or {}),
    )
    corpus.fit_tables(settings, show_progress=show_progress)
    release_free_memory()  # what the fit freed (decoded nodes, chunks of postings) leaves the process
    return corpus


def restore_context(
    info: dict[str, Any],
    arrays: dict[str, np.ndarray],
    index: VectorStoreIndex,
    vectors: Callable[[list[str]], np.ndarray],
) -> ThematicContext:
    """A saved context (:meth:`ThematicContext.get_state`) rebuilt on ``index``: in memory, or through the
    store's cluster backend (Qdrant).

    ``vectors(ids)`` gives the stored embeddings of evidence and claims, shape ``(len(ids), d)``.

    Raises:
        StateError: the context was fitted in memory and the index keeps clusters itself, or the reverse.
    """
    backend = adapter_for(index).store_clustering()
    saved = info.get("backend")
    if saved != (None if backend is None else backend.name):
        where = "in memory" if saved is None else f"on a {saved} store"
        raise StateError(
            f"The state's clusters were fitted {where}, not on this {type(index.vector_store).__name__} index."
        )
    if backend is not None:
        return ThematicContext.from_state(info, arrays, vectors, store=backend.restore_store)
    lender = adapter_for(index).store_rows()
    store = None
    if lender is not None:  # evidence read from the store's rows; only the claims' vectors are read here
        store = lambda info, dim, unit_vectors: RowClusterStore.from_state(info, dim, lender, unit_vectors)  # noqa: E731
    return ThematicContext.from_state(info, arrays, vectors, text_lookup=docstore_text_lookup(index), store=store)


def _meta(node: BaseNode | None, key: str) -> str | None:
    value = None if node is None else node.metadata.get(key)
    return None if value is None or str(value) == "" else str(value)


def _claim_items(claim_nodes: list[BaseNode], claim_vectors: np.ndarray, claim_key: str, theme_key: str) -> CorpusItems:
    return CorpusItems(
        ids=[n.node_id for n in claim_nodes],
        vectors=claim_vectors,
        is_claim=np.ones(len(claim_nodes), dtype=bool),
        claim_of=[str(n.metadata.get(claim_key) or n.node_id) for n in claim_nodes],
        themes=[n.metadata.get(theme_key) for n in claim_nodes],
        claim_texts={n.node_id: n.get_content(MetadataMode.NONE) for n in claim_nodes},
    )


def _memory_items(
    index: VectorStoreIndex,
    claim_nodes: list[BaseNode],
    mode: str,
    embed_model: BaseEmbedding,
    theme_key: str,
    claim_key: str,
    show_progress: bool,
) -> tuple[CorpusItems, np.ndarray | None, np.ndarray, list[str]]:
    """Evidence (from the index) and claims as one :class:`CorpusItems`; also the buffer its vectors lead
    (:func:`_stacked`), the claim vectors and the excluded ids.

    A store that lends its rows (:meth:`~llama_index_carag.stores.adapter_protocol.VectorStoreAdapter.store_rows`)
    gives :class:`~llama_index_carag.core.store_rows.StackedRows` instead, and no buffer."""
    lender, index_ids, index_vectors, index_keys = _index_vectors(index)
    claim_ids = [n.node_id for n in claim_nodes]
    claim_set = set(claim_ids)
    index_id_set = set(index_ids)
    evidence_rows: list[int] | None = None
    if claim_set & index_id_set:
        evidence_rows = [r for r, node_id in enumerate(index_ids) if node_id not in claim_set]
        evidence_ids = [index_ids[r] for r in evidence_rows]
    else:
        evidence_ids = index_ids
    if not evidence_ids:
        raise ValueError("The index holds no evidence nodes (only claims).")
    # Metadata is needed for every node only in supervised mode; CARAG-u reads a sample (label-leak check).
    wanted = evidence_ids if mode == "supervised" else evidence_ids[:1000]
    evidence_nodes = index.docstore.get_nodes(wanted, raise_error=False)
    missing = [i for i, n in zip(wanted, evidence_nodes) if n is None]
    if missing:
        raise ValueError(f"Node {missing[0]!r} is in the vector store but not in the docstore.")
    warn_on_embedded_labels(
        evidence_nodes[:1000] + claim_nodes[:1000], list(dict.fromkeys([theme_key, claim_key, *LABEL_METADATA_KEYS]))
    )
    claim_vectors = claim_embeddings(claim_nodes, embed_model, show_progress=show_progress)
    if claim_vectors.shape[0] and claim_vectors.shape[1] != index_vectors.shape[1]:
        raise ValueError(
            f"Claim embeddings have dimension {claim_vectors.shape[1]} but the index's have "
            f"{index_vectors.shape[1]}: the embed model differs from the one that built the index."
        )
    claims = _claim_items(claim_nodes, claim_vectors, claim_key, theme_key)
    claims.claim_of = [_meta(n, claim_key) or n.node_id for n in claim_nodes]
    claims.themes = [_meta(n, theme_key) for n in claim_nodes]
    if mode == "supervised":
        evidence_claims = [_meta(n, claim_key) for n in evidence_nodes]
        evidence_themes = [_meta(n, theme_key) for n in evidence_nodes]
    else:  # CARAG-u uses no labels: none are read
        evidence_claims, evidence_themes = [None] * len(evidence_ids), [None] * len(evidence_ids)
    if lender is not None and index_keys is not None:
        buffer = None
        vectors: np.ndarray | StackedRows = _lent(lender, index_keys, evidence_rows, claim_vectors)
    else:
        buffer = _stacked(index_vectors, evidence_rows, claim_vectors)
        vectors = buffer[: len(evidence_ids) + len(claim_ids)]
    items = CorpusItems(
        ids=list(evidence_ids) + claim_ids,
        vectors=vectors,  # type: ignore[arg-type]
        is_claim=np.array([False] * len(evidence_ids) + [True] * len(claim_ids)),
        claim_of=evidence_claims + list(claims.claim_of),
        themes=evidence_themes + list(claims.themes or []),
        claim_texts=claims.claim_texts,
    )
    return items, buffer, claim_vectors, [i for i in claim_ids if i in index_id_set]


def _index_vectors(index: VectorStoreIndex) -> tuple[StoreRows | None, list[str], np.ndarray, np.ndarray | None]:
    """``(lender, node ids, vectors, keys)`` of the index: a store that lends its rows (FAISS flat: the clusters
    read them in place, no copy) gives itself and the rows' keys, any other ``None`` for both."""
    lender = adapter_for(index).store_rows()
    keys = None
    if lender is not None:
        index_ids, keys = lender.ids_and_keys()
        index_vectors = lender.matrix()
    else:
        index_ids, index_vectors = get_node_embeddings(index, copy=False)
    if not index_ids:
        raise ValueError("The index is empty: add evidence nodes before fitting CARAG.")
    return lender, index_ids, as_matrix(index_vectors, name="index embeddings"), keys


def _lent(
    lender: StoreRows, index_keys: np.ndarray, evidence_rows: list[int] | None, claim_vectors: np.ndarray
) -> StackedRows:
    """The store's evidence rows (all, or ``evidence_rows`` of them) lent in place, then the claims' vectors."""
    keys = index_keys if evidence_rows is None else index_keys[np.asarray(evidence_rows, dtype=np.int64)]
    positions = lender.rows_of(keys)
    in_order = len(keys) == lender.matrix().shape[0] and np.array_equal(positions, np.arange(len(keys)))
    return StackedRows(lender, keys, None if in_order else positions, claim_vectors)


def _stacked(index_vectors: np.ndarray, evidence_rows: list[int] | None, claim_vectors: np.ndarray) -> np.ndarray:
    """A new buffer whose leading ``n + m`` rows are the evidence rows of ``index_vectors`` (all when ``None``)
    followed by the claims' vectors, float32, written in place (no intermediate copy), and then
    :func:`~llama_index_carag.core.vectors.growth_rows` spare rows: the context takes it over as its store
    (``fit(..., copy=False, buffer=...)``), the spare rows as its clusters' room to grow.  The index's own
    vectors are read, never changed."""
    n = index_vectors.shape[0] if evidence_rows is None else len(evidence_rows)
    m = claim_vectors.shape[0]
    buffer = np.empty((n + m + growth_rows(n + m), index_vectors.shape[1]), dtype=np.float32)
    if evidence_rows is None:
        buffer[:n] = index_vectors
    else:
        # mode='clip' (the rows are valid): 'raise' would buffer the whole output
        np.take(index_vectors, np.asarray(evidence_rows, dtype=np.int64), axis=0, out=buffer[:n], mode="clip")
    if m:
        buffer[n : n + m] = claim_vectors
    return buffer


def claim_embeddings(claim_nodes: Sequence[BaseNode], embed_model: BaseEmbedding, *, show_progress: bool) -> np.ndarray:
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


def warn_on_embedded_labels(nodes: Sequence[BaseNode], keys: Sequence[str]) -> None:
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


def docstore_text_lookup(index: VectorStoreIndex) -> Callable[[str], str]:
    """node id -> its text in the index's docstore (empty when unknown)."""
    docstore = index.docstore

    def lookup(node_id: str) -> str:
        node = docstore.get_node(node_id, raise_error=False)
        return "" if node is None else node.get_content(MetadataMode.NONE)

    return lookup
