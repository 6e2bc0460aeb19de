"""Reading node ids and their stored embeddings back out of a ``VectorStoreIndex``.

CARAG clusters the embeddings the index already holds, so the corpus is embedded
once, by the index.  LlamaIndex's docstore does not keep embeddings; they live
in the vector store, and each store keeps them its own way:

* ``FaissVectorStore``: FAISS row ``i`` ↔ ``index.index_struct.nodes_dict[str(i)]``;
  vectors come back with ``reconstruct_n``.
* ``FaissMapVectorStore`` (``IndexIDMap2``): its node-id ↔ FAISS-id map; vectors
  come back with ``reconstruct(faiss_id)``.
* ``SimpleVectorStore``: its ``embedding_dict``.
* any other store: the nodes' own ``embedding`` if the docstore or the store
  returns them, else an error that says how to proceed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex

logger = logging.getLogger(__name__)

__all__ = ["index_node_ids", "get_node_embeddings", "vector_store_kind", "faiss_metric", "store_size", "PERSISTED_KINDS"]


def vector_store_kind(index: "VectorStoreIndex") -> str:
    """``"faiss_map"``, ``"faiss"``, ``"simple"`` or the store's class name."""
    from llama_index.core.vector_stores.simple import SimpleVectorStore

    store = index.vector_store
    try:
        from llama_index.vector_stores.faiss import FaissMapVectorStore, FaissVectorStore
    except ImportError:  # pragma: no cover - faiss integration is a dependency
        FaissMapVectorStore = FaissVectorStore = ()  # type: ignore[assignment,misc]
    if isinstance(store, FaissMapVectorStore):
        return "faiss_map"
    if isinstance(store, FaissVectorStore):
        return "faiss"
    if isinstance(store, SimpleVectorStore):
        return "simple"
    return type(store).__name__


def store_size(index: "VectorStoreIndex") -> int | None:
    """Cheap change signal: the number of vectors in the store (``None`` if unknown, e.g. Qdrant)."""
    kind = vector_store_kind(index)
    store: Any = index.vector_store
    if kind == "faiss_map":
        return len(store._node_id_to_faiss_id_map)  # noqa: SLF001 - no public accessor
    if kind == "faiss":
        return int(store.client.ntotal)
    if kind == "simple":
        return len(store.data.embedding_dict)
    return None


def faiss_metric(index: "VectorStoreIndex") -> str | None:
    """``"inner_product"``/``"l2"`` for FAISS-backed indexes, else ``None``."""
    if vector_store_kind(index) not in ("faiss", "faiss_map"):
        return None
    import faiss

    raw = index.vector_store.client
    return "inner_product" if raw.metric_type == faiss.METRIC_INNER_PRODUCT else "l2"


def _faiss_vectors(raw: object) -> np.ndarray:
    """All vectors of a FAISS index as ``(ntotal, d)`` float32: a zero-copy read-only view for
    flat indexes, a reconstructed copy otherwise."""
    import faiss

    flat = faiss.downcast_index(raw)
    if isinstance(flat, faiss.IndexFlat):
        view = faiss.rev_swig_ptr(flat.get_xb(), flat.ntotal * flat.d).reshape(flat.ntotal, flat.d)
        view.flags.writeable = False
        return view
    return raw.reconstruct_n(0, raw.ntotal)  # type: ignore[attr-defined]


def index_node_ids(index: "VectorStoreIndex") -> list[str]:
    """Ids of the nodes the index's vector store can return, in storage order."""
    kind = vector_store_kind(index)
    if kind == "faiss_map":
        id_map = index.vector_store._node_id_to_faiss_id_map  # noqa: SLF001 - no public accessor
        return list(id_map)
    if kind == "faiss":
        nodes_dict = index.index_struct.nodes_dict
        return [nodes_dict[k] for k in sorted(nodes_dict, key=int)]
    if kind == "simple":
        return list(index.vector_store.data.embedding_dict)
    if kind == "QdrantVectorStore":
        return _qdrant_ids(index.vector_store)
    nodes_dict = getattr(index.index_struct, "nodes_dict", None) or {}
    if nodes_dict:
        return list(nodes_dict.values())
    raise ValueError(
        f"Cannot list the nodes of a {type(index.vector_store).__name__} index: CARAG supports FAISS, "
        "the simple vector store and Qdrant (or any store whose index keeps a node list)."
    )


def get_node_embeddings(
    index: "VectorStoreIndex", node_ids: list[str] | None = None, *, copy: bool = True
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
    ids = index_node_ids(index) if node_ids is None else list(node_ids)
    if not ids:
        return ids, np.zeros((0, 0), dtype=np.float32)
    reader = _EMBEDDINGS.get(vector_store_kind(index), _generic_embeddings)
    return ids, reader(index, ids, copy)


def _faiss_embeddings(index: "VectorStoreIndex", ids: list[str], copy: bool) -> np.ndarray:
    raw = index.vector_store.client
    if raw.ntotal == 0:
        raise ValueError("The FAISS index is empty.")
    all_vectors = _faiss_vectors(raw)
    position = {node_id: int(k) for k, node_id in index.index_struct.nodes_dict.items()}
    try:
        rows = np.fromiter((position[i] for i in ids), dtype=np.int64, count=len(ids))
    except KeyError as exc:
        raise ValueError(f"Node {exc.args[0]!r} has no embedding in the FAISS index.") from None
    if not copy and len(rows) == all_vectors.shape[0] and np.array_equal(rows, np.arange(len(rows))):
        return all_vectors  # storage order: a read-only view, no copy
    return np.ascontiguousarray(all_vectors[rows], dtype=np.float32)


def _faiss_map_embeddings(index: "VectorStoreIndex", ids: list[str], copy: bool) -> np.ndarray:
    import faiss

    store: Any = index.vector_store
    raw = store.client
    id_map = store._node_id_to_faiss_id_map  # noqa: SLF001 - no public accessor
    missing = [i for i in ids if i not in id_map]
    if missing:
        raise ValueError(f"Node {missing[0]!r} has no embedding in the FAISS index.")
    inner = faiss.downcast_index(raw.index)
    if isinstance(inner, faiss.IndexFlat) and raw.ntotal:
        row_of = {int(fid): r for r, fid in enumerate(faiss.vector_to_array(raw.id_map))}
        rows = np.fromiter((row_of[int(id_map[i])] for i in ids), dtype=np.int64, count=len(ids))
        return np.ascontiguousarray(_faiss_vectors(inner)[rows], dtype=np.float32)
    out = np.empty((len(ids), raw.d), dtype=np.float32)
    for r, node_id in enumerate(ids):
        out[r] = raw.reconstruct(int(id_map[node_id]))
    return out


def _simple_embeddings(index: "VectorStoreIndex", ids: list[str], copy: bool) -> np.ndarray:
    table = index.vector_store.data.embedding_dict  # type: ignore[attr-defined]
    missing = [i for i in ids if i not in table or table[i] is None]
    if missing:
        raise ValueError(f"Node {missing[0]!r} has no embedding in the vector store.")
    return np.asarray([table[i] for i in ids], dtype=np.float32)


def _generic_embeddings(index: "VectorStoreIndex", ids: list[str], copy: bool) -> np.ndarray:
    """Any other store: some return nodes with their embeddings; else the docstore's."""
    store: Any = index.vector_store
    nodes: list[Any] = []
    try:
        nodes = list(store.get_nodes(node_ids=ids))
    except (NotImplementedError, TypeError, AttributeError, ValueError):
        nodes = []
    by_id = {n.node_id: n.embedding for n in nodes if getattr(n, "embedding", None) is not None}
    if len(by_id) < len(ids):
        for node in index.docstore.get_nodes([i for i in ids if i not in by_id], raise_error=False):
            if node is not None and node.embedding is not None:
                by_id[node.node_id] = node.embedding
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ValueError(
            f"Node {missing[0]!r} has no embedding that a {type(store).__name__} returns; "
            "CARAG needs the corpus embeddings once, at fit time."
        )
    return np.asarray([by_id[i] for i in ids], dtype=np.float32)


def _qdrant_ids(store: Any) -> list[str]:
    ids: list[str] = []
    offset = None
    while True:
        points, offset = store.client.scroll(
            store.collection_name, limit=1024, offset=offset, with_payload=False, with_vectors=False
        )
        ids += [str(p.id) for p in points]
        if offset is None:
            return ids


def _qdrant_vectors(store: Any, ids: list[str]) -> np.ndarray:
    name = store.dense_vector_name or ""
    found: dict[str, Any] = {}
    for start in range(0, len(ids), 1024):
        for p in store.client.retrieve(store.collection_name, ids=ids[start : start + 1024], with_vectors=True, with_payload=False):
            found[str(p.id)] = p.vector[name] if isinstance(p.vector, dict) else p.vector
    missing = [i for i in ids if i not in found]
    if missing:
        raise ValueError(f"Node {missing[0]!r} is not in the Qdrant collection {store.collection_name!r}.")
    return np.asarray([found[i] for i in ids], dtype=np.float32)


def _qdrant_embeddings(index: "VectorStoreIndex", ids: list[str], copy: bool) -> np.ndarray:
    return _qdrant_vectors(index.vector_store, ids)


#: How each store kind returns stored embeddings (any other kind: :func:`_generic_embeddings`).
_EMBEDDINGS = {
    "faiss": _faiss_embeddings,
    "faiss_map": _faiss_map_embeddings,
    "simple": _simple_embeddings,
    "QdrantVectorStore": _qdrant_embeddings,
}
#: Store kinds whose index ``persist_index=True`` saves on disk (reloadable without ``index=``).
PERSISTED_KINDS = ("faiss", "faiss_map", "simple")
