"""FAISS behind the vector-store adapter protocol: ``FaissVectorStore`` and ``FaissMapVectorStore``.

* ``FaissVectorStore``: FAISS row ``i`` is ``index.index_struct.nodes_dict[str(i)]``; vectors are
  read straight from the flat index (a zero-copy view) or with ``reconstruct_n``.  It cannot delete.
* ``FaissMapVectorStore`` (``IndexIDMap2``): node id → FAISS id through the store's id map;
  vectors are read by FAISS id.  Our :class:`~llama_index_carag.stores.faiss_store.SafeFaissMapVectorStore`
  gives that map publicly (:meth:`~llama_index_carag.stores.faiss_store.SafeFaissMapVectorStore.faiss_ids`);
  the upstream class (llama-index-vector-stores-faiss 0.7) has no public accessor for it, so for
  a plain ``FaissMapVectorStore`` this module reads its private map — the one place that does.

Both use only the store's public ``client`` (the raw FAISS index) otherwise.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.stores.base_adapter import StoreAdapter
from llama_index_carag.stores.faiss_rows import FaissRows
from llama_index_carag.stores.faiss_store import SafeFaissMapVectorStore

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.storage.docstore.types import BaseDocumentStore

logger = logging.getLogger(__name__)

#: Below ``ntotal / _FEW`` ids an id-mapped index reads vectors one by one (O(batch)) instead of mapping every row.
_FEW = 16


def _faiss_classes() -> tuple[type, type]:
    from llama_index.vector_stores.faiss import FaissMapVectorStore, FaissVectorStore

    return FaissVectorStore, FaissMapVectorStore


def flat_vectors(raw: Any) -> np.ndarray:
    """All vectors of a FAISS index as ``(ntotal, d)`` float32: a zero-copy read-only view for flat
    indexes, a reconstructed copy otherwise."""
    import faiss

    flat = faiss.downcast_index(raw)
    if isinstance(flat, faiss.IndexFlat):
        view = faiss.rev_swig_ptr(flat.get_xb(), flat.ntotal * flat.d).reshape(flat.ntotal, flat.d)
        view.flags.writeable = False
        return view
    return raw.reconstruct_n(0, raw.ntotal)


class FaissAdapter(StoreAdapter):
    """``FaissVectorStore``: rows in insertion order, no deletes."""

    kind = "faiss"
    persisted = True
    delete_hint = (
        "build the index with an id-mapped FAISS index (build_faiss_index(..., id_map=True) / FaissMapVectorStore)."
    )

    @classmethod
    def handles(cls, vector_store: Any) -> bool:
        plain, mapped = _faiss_classes()
        return isinstance(vector_store, plain) and not isinstance(vector_store, mapped)

    def node_ids(self) -> list[str]:
        nodes_dict = self.index.index_struct.nodes_dict
        return [nodes_dict[k] for k in sorted(nodes_dict, key=int)]

    def embeddings(self, ids: Sequence[str], *, copy: bool = True) -> np.ndarray:
        raw = self.store.client
        if raw.ntotal == 0:
            raise ValueError("The FAISS index is empty.")
        all_vectors = flat_vectors(raw)
        position = {node_id: int(k) for k, node_id in self.index.index_struct.nodes_dict.items()}
        try:
            rows = np.fromiter((position[i] for i in ids), dtype=np.int64, count=len(ids))
        except KeyError as exc:
            raise ValueError(f"Node {exc.args[0]!r} has no embedding in the FAISS index.") from None
        if not copy and len(rows) == all_vectors.shape[0] and np.array_equal(rows, np.arange(len(rows))):
            return all_vectors  # storage order: a read-only view, no copy
        return np.ascontiguousarray(all_vectors[rows], dtype=np.float32)

    def size(self) -> int | None:
        return int(self.store.client.ntotal)

    def store_rows(self) -> FaissRows | None:
        return FaissRows.of(self.index)

    def metric(self) -> str | None:
        import faiss

        return "inner_product" if self.store.client.metric_type == faiss.METRIC_INNER_PRODUCT else "l2"

    @classmethod
    def load_index(
        cls, folder: str | os.PathLike[str], embed_model: BaseEmbedding, *, docstore: BaseDocumentStore | None = None
    ) -> VectorStoreIndex:
        return load_faiss_index(folder, embed_model, id_map=False, docstore=docstore)


class FaissMapAdapter(FaissAdapter):
    """``FaissMapVectorStore`` (``IndexIDMap2``): node ids mapped to FAISS ids; deletes supported."""

    kind = "faiss_map"

    @classmethod
    def handles(cls, vector_store: Any) -> bool:
        return isinstance(vector_store, _faiss_classes()[1])

    def _id_map(self) -> Mapping[str, int]:
        store = self.store
        if isinstance(store, SafeFaissMapVectorStore):
            return store.faiss_ids()
        return store._node_id_to_faiss_id_map  # the upstream store has no public accessor

    def node_ids(self) -> list[str]:
        return list(self._id_map())

    def embeddings(self, ids: Sequence[str], *, copy: bool = True) -> np.ndarray:
        import faiss

        raw = self.store.client
        id_map = self._id_map()
        missing = [i for i in ids if i not in id_map]
        if missing:
            raise ValueError(f"Node {missing[0]!r} has no embedding in the FAISS index.")
        inner = faiss.downcast_index(raw.index)
        if isinstance(inner, faiss.IndexFlat) and raw.ntotal and len(ids) * _FEW < raw.ntotal:
            # a few vectors (an edit's batch): by FAISS id through IndexIDMap2's reverse map, O(batch)
            out = np.empty((len(ids), raw.d), dtype=np.float32)
            for r, node_id in enumerate(ids):
                out[r] = raw.reconstruct(int(id_map[node_id]))
            return out
        if isinstance(inner, faiss.IndexFlat) and raw.ntotal:
            row_of = {int(fid): r for r, fid in enumerate(faiss.vector_to_array(raw.id_map))}
            rows = np.fromiter((row_of[int(id_map[i])] for i in ids), dtype=np.int64, count=len(ids))
            return np.ascontiguousarray(flat_vectors(inner)[rows], dtype=np.float32)
        out = np.empty((len(ids), raw.d), dtype=np.float32)
        for r, node_id in enumerate(ids):
            out[r] = raw.reconstruct(int(id_map[node_id]))
        return out

    @classmethod
    def load_index(
        cls, folder: str | os.PathLike[str], embed_model: BaseEmbedding, *, docstore: BaseDocumentStore | None = None
    ) -> VectorStoreIndex:
        return load_faiss_index(folder, embed_model, id_map=True, docstore=docstore)


def load_faiss_index(
    persist_dir: str | os.PathLike[str],
    embed_model: BaseEmbedding,
    *,
    id_map: bool | None = None,
    docstore: BaseDocumentStore | None = None,
) -> VectorStoreIndex:
    """Reload an index persisted with ``index.storage_context.persist(persist_dir)``.

    Its index store is a :class:`~llama_index_carag.stores.index_store.DeferredIndexStore` over the persisted
    ``SimpleIndexStore`` (edits write the index struct when it is read or persisted).  This is the index as of
    the folder's last full persist: the edits a retriever journaled since
    (:mod:`~llama_index_carag.retrieval.journal`) are replayed by ``ContextAwareRetriever.from_persist_dir``.

    Args:
        persist_dir: the folder.
        embed_model: the model the index was built with.
        id_map: whether it is a ``FaissMapVectorStore``; detected from the folder when ``None``.
        docstore: where its nodes are (DuckDB, Redis, …); ``None``: the folder's ``docstore.json``.

    Raises:
        FileNotFoundError: the folder holds no persisted index.
    """
    from llama_index.core import StorageContext, load_index_from_storage
    from llama_index.vector_stores.faiss import FaissVectorStore

    from llama_index_carag.stores.index_store import DeferredIndexStore

    folder = Path(persist_dir)
    if docstore is None and not (folder / "docstore.json").is_file():
        raise FileNotFoundError(f"No persisted index in {folder} (missing docstore.json).")
    if id_map is None:
        from llama_index.vector_stores.faiss.map_store import DEFAULT_ID_MAP_NAME

        id_map = (folder / DEFAULT_ID_MAP_NAME).is_file()
    vector_store = (
        SafeFaissMapVectorStore.from_persist_dir(str(folder))
        if id_map
        else FaissVectorStore.from_persist_dir(str(folder))
    )
    storage = StorageContext.from_defaults(
        persist_dir=str(folder),
        vector_store=vector_store,
        index_store=DeferredIndexStore.from_persist_dir(str(folder)),
        docstore=docstore,
    )
    return load_index_from_storage(storage, embed_model=embed_model)  # type: ignore[return-value]
