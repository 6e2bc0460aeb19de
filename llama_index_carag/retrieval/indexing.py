"""Building and reloading the FAISS ``VectorStoreIndex`` that CARAG searches.

CARAG scores are cosine similarities, "higher is better": the index uses FAISS
``IndexFlatIP`` over L2-normalised embeddings (the Hugging Face embed models
normalise by default).  ``id_map=True`` wraps it in ``IndexIDMap2`` so nodes can
be deleted (``FaissMapVectorStore``).  Reloading lives with the vector-store adapters
(:func:`~llama_index_carag.stores.faiss_adapter.load_faiss_index`,
:func:`~llama_index_carag.stores.vector_stores.load_persisted_index`; re-exported here).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from llama_index_carag.stores.faiss_adapter import load_faiss_index
from llama_index_carag.stores.vector_stores import load_persisted_index

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.schema import BaseNode
    from llama_index.core.storage.docstore.types import BaseDocumentStore
    from llama_index.core.vector_stores.types import BasePydanticVectorStore

logger = logging.getLogger(__name__)

__all__ = ["embedding_dimension", "build_faiss_index", "load_faiss_index", "load_persisted_index"]


def embedding_dimension(embed_model: BaseEmbedding) -> int:
    """Dimension of the embed model's vectors (embeds one short probe text)."""
    return len(embed_model.get_text_embedding("dimension probe"))


def build_faiss_index(
    nodes: Sequence[BaseNode],
    embed_model: BaseEmbedding,
    *,
    id_map: bool = False,
    show_progress: bool = False,
    docstore: BaseDocumentStore | None = None,
) -> VectorStoreIndex:
    """Embed ``nodes`` and index them in FAISS (inner product on unit vectors = cosine).

    The index store is a :class:`~llama_index_carag.stores.index_store.DeferredIndexStore` over LlamaIndex's
    ``SimpleIndexStore``: an edit does not re-serialise the index struct; it is written when read or persisted.

    Args:
        nodes: the evidence nodes (their metadata is embedded only where not
            excluded; see :mod:`llama_index_carag.datasets`).
        embed_model: the model that embeds both corpus and queries.
        id_map: use ``IndexIDMap2`` + ``FaissMapVectorStore`` (supports deletes).
        show_progress: progress bar while embedding.
        docstore: where the nodes are stored (default a new ``SimpleDocumentStore``, saved as
            ``docstore.json``); e.g. ``open_docstore("duckdb", folder)`` or ``open_docstore("redis://…")``
            (:func:`~llama_index_carag.stores.docstores.open_docstore`), which write each node as it is added.

    Raises:
        ValueError: no nodes.
    """
    import faiss
    from llama_index.core import StorageContext, VectorStoreIndex

    from llama_index_carag.stores.docstores import docstore_batch
    from llama_index_carag.stores.index_store import DeferredIndexStore

    if len(nodes) == 0:
        raise ValueError("Cannot build an index from zero nodes.")
    dim = embedding_dimension(embed_model)
    flat = faiss.IndexFlatIP(dim)
    vector_store: BasePydanticVectorStore
    if id_map:
        from llama_index_carag.stores.faiss_store import SafeFaissMapVectorStore

        vector_store = SafeFaissMapVectorStore(faiss_index=faiss.IndexIDMap2(flat))
    else:
        from llama_index.vector_stores.faiss import FaissVectorStore

        vector_store = FaissVectorStore(faiss_index=flat)
    storage = StorageContext.from_defaults(
        vector_store=vector_store, index_store=DeferredIndexStore(), docstore=docstore
    )
    with docstore_batch(storage.docstore):  # a DuckDB/Redis docstore: the nodes in one write, not one per node
        return VectorStoreIndex(
            list(nodes), storage_context=storage, embed_model=embed_model, show_progress=show_progress
        )
