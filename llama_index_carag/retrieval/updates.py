"""Corpus edits without refitting (insert, delete, sync) and refitting a corpus as it is now.

Edits go through the index's vector-store adapter
(:func:`~llama_index_carag.stores.vector_stores.adapter_for`) and tell the corpus's fitted
tables which passages changed (:meth:`~llama_index_carag.retrieval.fitted_corpus.FittedCorpus.update_tables`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.schema import BaseNode, TextNode

from llama_index_carag.core.context import CorpusItems
from llama_index_carag.datasets import LABEL_METADATA_KEYS
from llama_index_carag.retrieval.fitted_corpus import FittedCorpus
from llama_index_carag.retrieval.fitting import fit_corpus, warn_on_embedded_labels
from llama_index_carag.settings import CaragSettings
from llama_index_carag.stores.docstores import docstore_batch
from llama_index_carag.stores.vector_stores import (
    adapter_for,
    get_node_embeddings,
    index_node_ids,
    nodes_by_id,
    store_size,
)

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding

logger = logging.getLogger(__name__)

__all__ = [
    "store_size",
    "nodes_by_id",
    "insert_nodes",
    "delete_nodes",
    "sync",
    "docstore_holds_nodes",
    "reconcile_docstore",
    "refit_corpus",
    "claim_nodes_of",
]


def _meta(node: BaseNode | None, key: str) -> str | None:
    value = None if node is None else node.metadata.get(key)
    return None if value is None or str(value) == "" else str(value)


def _evidence_items(index: VectorStoreIndex, corpus: FittedCorpus, node_ids: Sequence[str]) -> CorpusItems:
    ids, vectors = get_node_embeddings(index, list(node_ids))
    nodes = nodes_by_id(index, ids)
    supervised = corpus.context.mode == "supervised"
    return CorpusItems(
        ids=ids,
        vectors=vectors,
        is_claim=np.zeros(len(ids), dtype=bool),
        claim_of=[_meta(n, corpus.claim_key) if supervised else None for n in nodes],
        themes=[_meta(n, corpus.theme_key) if supervised else None for n in nodes],
    )


def insert_nodes(index: VectorStoreIndex, corpus: FittedCorpus, nodes: list[BaseNode], **insert_kwargs: Any) -> bool:
    """Insert into the index and the context (ids that exist are replaced); False when there was nothing to do."""
    if not nodes:
        return False
    ids = [n.node_id for n in nodes]
    if len(set(ids)) != len(ids):
        raise ValueError("insert_nodes: duplicated node ids in the batch.")
    warn_on_embedded_labels(nodes, LABEL_METADATA_KEYS)
    claims = set(corpus.claim_ids)
    existing = [i for i in ids if i in corpus.context and i not in claims]
    if existing:
        delete_nodes(index, corpus, existing)
    with docstore_batch(index.docstore):  # a DuckDB/Redis docstore: the batch in one write, not one per node
        adapter_for(index).insert(nodes, **insert_kwargs)
    corpus.exclude([i for i in ids if i in claims])  # a claim put into the index is never evidence
    evidence = [i for i in ids if i not in claims]
    if evidence:
        corpus.context.add_items(_evidence_items(index, corpus, evidence))
    corpus.update_tables(ids)  # after the context: tables read the corpus as it is now
    return True


def delete_nodes(index: VectorStoreIndex, corpus: FittedCorpus, node_ids: Sequence[str], **delete_kwargs: Any) -> bool:
    """Delete from the index and from every SOI; False when there was nothing to do."""
    ids = [i for i in node_ids if i not in corpus.exclude_ids]
    if not ids:
        return False
    adapter_for(index).delete(ids, **delete_kwargs)
    corpus.context.remove_items(ids)
    corpus.update_tables(ids)
    return True


def sync(index: VectorStoreIndex, corpus: FittedCorpus) -> tuple[int, int]:
    """Bring the context in line with nodes inserted into or deleted from the index directly; ``(added, removed)``."""
    claims = set(corpus.claim_ids)
    all_ids = index_node_ids(index)
    corpus.exclude([i for i in all_ids if i in claims])  # claims put into the index directly
    current = [i for i in all_ids if i not in corpus.exclude_ids]
    current_set = set(current)
    known = {i for i, _ in corpus.context.iter_items() if i not in claims}
    gone = [i for i in known if i not in current_set]
    removed = corpus.context.remove_items(gone)
    added = [i for i in current if i not in known]
    if added:
        corpus.context.add_items(_evidence_items(index, corpus, added))
    corpus.update_tables(gone + added)
    return len(added), removed


def docstore_holds_nodes(index: VectorStoreIndex) -> bool:
    """Whether the index keeps its nodes in a docstore other than LlamaIndex's in-memory one (DuckDB, Redis, …),
    which is written at every edit while the vector side is saved by ``persist``."""
    from llama_index.core.storage.docstore.simple_docstore import SimpleDocumentStore

    return not index.vector_store.stores_text and type(index.docstore) is not SimpleDocumentStore


def reconcile_docstore(index: VectorStoreIndex, corpus: FittedCorpus) -> tuple[list[BaseNode], list[str]]:
    """Bring the vector side in line with the docstore, the record of the edits, after a crash.

    A docstore that writes each node when it is added (DuckDB, Redis) can be ahead of the vector store saved by
    the last ``persist``: nodes inserted since are in the docstore only, nodes deleted since are on the vector
    side only.  Returns ``(nodes to insert, ids to delete)``: the caller inserts the first (they are embedded
    again: the docstore keeps no embeddings) and deletes the second, through the corpus so that the fitted
    context follows.  Claims kept out of the evidence are left alone.
    """
    from llama_index_carag.stores.docstores import reconcile_ids

    only_stored, only_vectors = reconcile_ids(set(index_node_ids(index)), index.docstore)
    excluded = corpus.exclude_ids
    only_stored = [i for i in only_stored if i not in excluded]
    only_vectors = [i for i in only_vectors if i not in excluded]
    nodes = [n for n in index.docstore.get_nodes(only_stored, raise_error=False) if n is not None]
    if nodes or only_vectors:
        logger.warning(
            "The docstore and the saved vectors differ (an edit after the last persist): %d node(s) only in the "
            "docstore are inserted, %d only on the vector side are deleted.",
            len(nodes),
            len(only_vectors),
        )
    return list(nodes), only_vectors


def claim_nodes_of(corpus: FittedCorpus) -> list[TextNode]:
    """The clustered claims as nodes again (text, claim link, theme, saved embedding), to refit with."""
    context = corpus.context
    identity = {node: claim for claim, node in context.claim_node_of().items()}
    out = []
    for node_id, vector in zip(corpus.claim_ids, corpus.claim_vectors):
        metadata: dict[str, Any] = {corpus.claim_key: identity.get(node_id, node_id)}
        theme = context.theme_of(node_id)
        if theme is not None:
            metadata[corpus.theme_key] = theme
        keys = list(metadata)
        out.append(
            TextNode(
                id_=node_id,
                text=context.claim_text(node_id),
                metadata=metadata,
                embedding=vector.tolist(),
                excluded_embed_metadata_keys=keys,
                excluded_llm_metadata_keys=keys,
            )
        )
    return out


def refit_corpus(
    index: VectorStoreIndex,
    corpus: FittedCorpus,
    settings: CaragSettings,
    embed_model: BaseEmbedding,
    *,
    show_progress: bool = False,
) -> FittedCorpus:
    """Fit a new corpus on the index as it is now, with the same claims and keys; a calibrated corpus is
    calibrated again (from the same global preset, the saved claim links and the links of evidence inserted
    since, through its ``claim_key``)."""
    refitted = fit_corpus(
        index,
        claim_nodes_of(corpus) or None,
        settings,
        embed_model=embed_model,
        theme_key=corpus.theme_key,
        claim_key=corpus.claim_key,
        clusterer_params=corpus.clusterer_params,
        show_progress=show_progress,
    )
    calibration = corpus.calibration
    if calibration is not None:
        from llama_index_carag.retrieval.calibration import calibrate_corpus

        refitted.calibration = calibrate_corpus(
            index,
            refitted,
            calibration.base,
            claim_nodes=claim_nodes_of(refitted),  # evidence inserted since may name its claim
            links=calibration.links,
            embed_model=embed_model,
            show_progress=show_progress,
        )
    return refitted
