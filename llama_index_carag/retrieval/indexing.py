"""Building and reloading the FAISS ``VectorStoreIndex`` that CARAG searches.

CARAG scores are cosine similarities, "higher is better": the index uses FAISS
``IndexFlatIP`` over L2-normalised embeddings (the Hugging Face embed models
normalise by default).  ``id_map=True`` wraps it in ``IndexIDMap2`` so nodes can
be deleted (``FaissMapVectorStore``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.schema import BaseNode

logger = logging.getLogger(__name__)

__all__ = ["embedding_dimension", "build_faiss_index", "load_faiss_index", "load_persisted_index"]


def embedding_dimension(embed_model: "BaseEmbedding") -> int:
    """Dimension of the embed model's vectors (embeds one short probe text)."""
    return len(embed_model.get_text_embedding("dimension probe"))


def build_faiss_index(
    nodes: Sequence["BaseNode"],
    embed_model: "BaseEmbedding",
    *,
    id_map: bool = False,
    show_progress: bool = False,
) -> "VectorStoreIndex":
    """Embed ``nodes`` and index them in FAISS (inner product on unit vectors = cosine).

    Args:
        nodes: the evidence nodes (their metadata is embedded only where not
            excluded; see :mod:`llama_index_carag.datasets`).
        embed_model: the model that embeds both corpus and queries.
        id_map: use ``IndexIDMap2`` + ``FaissMapVectorStore`` (supports deletes).
        show_progress: progress bar while embedding.

    Raises:
        ValueError: no nodes.
    """
    import faiss
    from llama_index.core import StorageContext, VectorStoreIndex

    if len(nodes) == 0:
        raise ValueError("Cannot build an index from zero nodes.")
    dim = embedding_dimension(embed_model)
    flat = faiss.IndexFlatIP(dim)
    if id_map:
        from llama_index_carag.backends.faiss_store import SafeFaissMapVectorStore

        vector_store = SafeFaissMapVectorStore(faiss_index=faiss.IndexIDMap2(flat))
    else:
        from llama_index.vector_stores.faiss import FaissVectorStore

        vector_store = FaissVectorStore(faiss_index=flat)
    storage = StorageContext.from_defaults(vector_store=vector_store)
    return VectorStoreIndex(
        list(nodes), storage_context=storage, embed_model=embed_model, show_progress=show_progress
    )


def load_faiss_index(
    persist_dir: str | os.PathLike[str], embed_model: "BaseEmbedding", *, id_map: bool | None = None
) -> "VectorStoreIndex":
    """Reload an index persisted with ``index.storage_context.persist(persist_dir)``.

    Args:
        persist_dir: the folder.
        embed_model: the model the index was built with.
        id_map: whether it is a ``FaissMapVectorStore``; detected from the
            folder when ``None``.

    Raises:
        FileNotFoundError: the folder holds no persisted index.
    """
    from llama_index.core import StorageContext, load_index_from_storage
    from llama_index.vector_stores.faiss import FaissVectorStore

    folder = Path(persist_dir)
    if not (folder / "docstore.json").is_file():
        raise FileNotFoundError(f"No persisted index in {folder} (missing docstore.json).")
    if id_map is None:
        from llama_index.vector_stores.faiss.map_store import DEFAULT_ID_MAP_NAME

        id_map = (folder / DEFAULT_ID_MAP_NAME).is_file()
    if id_map:
        from llama_index_carag.backends.faiss_store import SafeFaissMapVectorStore

        vector_store = SafeFaissMapVectorStore.from_persist_dir(str(folder))
    else:
        vector_store = FaissVectorStore.from_persist_dir(str(folder))
    storage = StorageContext.from_defaults(persist_dir=str(folder), vector_store=vector_store)
    index = load_index_from_storage(storage, embed_model=embed_model)
    return index  # type: ignore[return-value]


def load_persisted_index(
    persist_dir: str | os.PathLike[str], embed_model: "BaseEmbedding", kind: str
) -> "VectorStoreIndex":
    """Reload a persisted ``VectorStoreIndex`` of a given store kind (``faiss``, ``faiss_map``, ``simple``).

    Raises:
        FileNotFoundError: nothing persisted there.
        ValueError: the files cannot be read as that kind of index.
    """
    from llama_index.core import StorageContext, load_index_from_storage

    folder = Path(persist_dir)
    if not (folder / "docstore.json").is_file():
        raise FileNotFoundError(f"No persisted index in {folder} (missing docstore.json).")
    try:
        if kind in ("faiss", "faiss_map"):
            return load_faiss_index(folder, embed_model, id_map=kind == "faiss_map")
        storage = StorageContext.from_defaults(persist_dir=str(folder))
        return load_index_from_storage(storage, embed_model=embed_model)  # type: ignore[return-value]
    except RuntimeError as exc:  # FAISS reports unreadable files this way
        raise ValueError(f"Cannot read the {kind} index in {folder}: {str(exc).splitlines()[0]}") from None
