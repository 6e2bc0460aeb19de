"""The vector-store adapters by store, and the reads CARAG makes through them.

CARAG clusters the embeddings the index already holds, so the corpus is embedded once, by the
index.  LlamaIndex's docstore does not keep embeddings; they live in the vector store, and each
store keeps them its own way: :func:`adapter_for` gives the index's
:class:`~llama_index_carag.stores.adapter_protocol.VectorStoreAdapter` (FAISS, FAISS with an id map,
the simple store, Qdrant, or :class:`~llama_index_carag.stores.base_adapter.GenericAdapter`).
The module functions (:func:`get_node_embeddings`, :func:`index_node_ids`, …) are shorthands
for the adapter's methods.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from llama_index_carag.stores.adapter_protocol import VectorStoreAdapter
from llama_index_carag.stores.base_adapter import GenericAdapter
from llama_index_carag.stores.faiss_adapter import FaissAdapter, FaissMapAdapter
from llama_index_carag.stores.qdrant_adapter import QdrantAdapter
from llama_index_carag.stores.simple_adapter import SimpleAdapter

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.schema import BaseNode
    from llama_index.core.storage.docstore.types import BaseDocumentStore

logger = logging.getLogger(__name__)

#: The adapters, most specific first (the id-mapped FAISS store is a FAISS store too); any other
#: store gets :class:`GenericAdapter`.  A new backend: one adapter class, listed here.
ADAPTERS: tuple[type[FaissMapAdapter | FaissAdapter | SimpleAdapter | QdrantAdapter], ...] = (
    FaissMapAdapter,
    FaissAdapter,
    SimpleAdapter,
    QdrantAdapter,
)
#: Store kinds whose index ``persist_index=True`` saves on disk (reloadable without ``index=``).
PERSISTED_KINDS: tuple[str, ...] = tuple(cls.kind for cls in ADAPTERS if cls.persisted)


def adapter_for(index: VectorStoreIndex) -> VectorStoreAdapter:
    """The adapter of the index's vector store."""
    store = index.vector_store
    for cls in ADAPTERS:
        if cls.handles(store):
            return cls(index)
    return GenericAdapter(index)


def load_persisted_index(
    persist_dir: str | os.PathLike[str],
    embed_model: BaseEmbedding,
    kind: str,
    *,
    docstore: BaseDocumentStore | None = None,
) -> VectorStoreIndex:
    """Reload a persisted ``VectorStoreIndex`` of a given store kind (one of :data:`PERSISTED_KINDS`).

    Its nodes are read from ``docstore`` when given, else from the docstore the folder records
    (:data:`~llama_index_carag.stores.docstores.SPEC_NAME`: DuckDB, Redis), else from its ``docstore.json``.

    Raises:
        FileNotFoundError: nothing persisted there.
        ValueError: the kind is not saved on disk, or the files cannot be read as that kind of index.
    """
    from llama_index_carag.core.commit import roll_forward
    from llama_index_carag.core.writer_lock import reading
    from llama_index_carag.stores import docstores

    folder = Path(persist_dir)
    cls = next((c for c in ADAPTERS if c.kind == kind and c.persisted), None)
    if cls is None:
        raise ValueError(f"A {kind} index is not saved on disk; pass index=... to reload it.")
    with reading(folder):  # no full persist switches the folder's files while they are read
        roll_forward(folder)  # a full persist a crash interrupted after its commit: finished first
        if docstore is None:
            docstore = docstores.open_persisted_docstore(folder)
        if docstore is None and not (folder / "docstore.json").is_file():
            raise FileNotFoundError(f"No persisted index in {folder} (missing docstore.json).")
        try:
            return cls.load_index(folder, embed_model, docstore=docstore)
        except (RuntimeError, ValueError, KeyError, TypeError, SyntaxError) as exc:  # FAISS: RuntimeError;
            # LlamaIndex's JSON / literal_eval of a damaged file: the rest
            first = (str(exc).splitlines() or [""])[0]
            raise ValueError(
                f"Cannot read the {kind} index in {folder}: its files are damaged ({type(exc).__name__}: {first}); "
                "restore the folder from a copy or rebuild it with carag index"
            ) from None


def store_size(index: VectorStoreIndex) -> int | None:
    """Cheap change signal: the number of vectors in the store (``None`` if unknown, e.g. Qdrant)."""
    return adapter_for(index).size()


def index_node_ids(index: VectorStoreIndex) -> list[str]:
    """Ids of the nodes the index's vector store can return, in storage order."""
    return adapter_for(index).node_ids()


def get_node_embeddings(
    index: VectorStoreIndex, node_ids: list[str] | None = None, *, copy: bool = True
) -> tuple[list[str], np.ndarray]:
    """The stored embeddings of ``node_ids`` (default: all nodes of the index).

    With ``copy=False`` a flat FAISS index in storage order is returned as a
    read-only view of FAISS's own memory (no copy of a possibly huge matrix);
    use it before the index changes, never after.

    Returns:
        ``(ids, matrix)`` with ``matrix`` of shape ``(len(ids), d)``, float32,
        rows in the order of ``ids``.

    Raises:
        ValueError: a node has no stored embedding, or the store cannot return them.
    """
    adapter = adapter_for(index)
    ids = adapter.node_ids() if node_ids is None else list(node_ids)
    if not ids:
        return ids, np.zeros((0, 0), dtype=np.float32)
    return ids, adapter.embeddings(ids, copy=copy)


def nodes_by_id(index: VectorStoreIndex, ids: Sequence[str]) -> list[BaseNode | None]:
    """Nodes from the docstore, or from the vector store when it keeps the text (Qdrant); ``None`` where neither has one."""
    found = {n.node_id: n for n in index.docstore.get_nodes(list(ids), raise_error=False) if n is not None}
    missing = [i for i in ids if i not in found]
    if missing and index.vector_store.stores_text:
        try:
            found.update({n.node_id: n for n in index.vector_store.get_nodes(node_ids=missing)})
        except (NotImplementedError, ValueError):
            pass
    return [found.get(i) for i in ids]
