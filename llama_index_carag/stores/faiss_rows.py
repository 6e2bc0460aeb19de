"""A FAISS flat index's vectors, lent in place to a fitted context: :class:`FaissRows`.

Implements :class:`~llama_index_carag.core.store_rows.StoreRows` for the two FAISS stores whose rows can be
named by a key that never changes:

* ``FaissVectorStore`` over ``IndexFlat``: the key is the row (it cannot delete, so rows never move);
* :class:`~llama_index_carag.stores.faiss_store.SafeFaissMapVectorStore` over ``IndexIDMap2(IndexFlat)``:
  the key is the FAISS id.  Its ids only grow and a delete keeps the rows' order, so the id map stays sorted
  and a key's row is found by binary search.

The matrix is FAISS's own memory (``rev_swig_ptr``), read again after every write (an add may reallocate it);
inner products by row use FAISS's ``fvec_inner_products_by_idx``, on two threads for a large cluster.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.core.store_rows import StoreHits
from llama_index_carag.core.vectors import scan_pool
from llama_index_carag.stores.faiss_store import SafeFaissMapVectorStore

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex

#: Rows from which one cluster's inner products are split over the scan threads.
_PARALLEL_ROWS = 16_384


class FaissRows:
    """:class:`~llama_index_carag.core.store_rows.StoreRows` over a FAISS flat index (see the module).

    Use :meth:`of`, which returns ``None`` for an index whose rows cannot be lent.
    """

    def __init__(self, index: VectorStoreIndex, flat: Any, id_map: Any | None) -> None:
        self.index = index
        self._flat = flat  # the IndexFlat holding the rows
        self._mapped = id_map  # the IndexIDMap2 over it (SafeFaissMapVectorStore), or None
        self._reverse: dict[str, int] | None = None  # plain store: node id -> row, built on a large lookup

    @classmethod
    def of(cls, index: VectorStoreIndex) -> FaissRows | None:
        """The rows of ``index``'s FAISS store, or ``None`` when it is not flat (or, for an id-mapped store,
        not a :class:`SafeFaissMapVectorStore` with sorted ids)."""
        import faiss
        from llama_index.vector_stores.faiss import FaissMapVectorStore, FaissVectorStore

        store = index.vector_store
        raw = faiss.downcast_index(store.client)
        if isinstance(store, SafeFaissMapVectorStore):
            if not isinstance(raw, faiss.IndexIDMap2):
                return None
            inner = faiss.downcast_index(raw.index)
            if not isinstance(inner, faiss.IndexFlat) or not _sorted(_id_map(raw)):
                return None
            return cls(index, inner, raw)
        if isinstance(store, FaissMapVectorStore) or not isinstance(store, FaissVectorStore):
            return None  # the upstream map store can reuse ids after a delete: no stable key
        return cls(index, raw, None) if isinstance(raw, faiss.IndexFlat) else None

    @property
    def dim(self) -> int:
        return int(self._flat.d)

    def bounds_rows(self, hits: StoreHits) -> bool:
        import faiss

        return hits.store is self.index.vector_store and int(self._flat.metric_type) == int(faiss.METRIC_INNER_PRODUCT)

    def matrix(self) -> np.ndarray:
        import faiss

        n, d = int(self._flat.ntotal), int(self._flat.d)
        if n == 0:
            return np.zeros((0, d), dtype=np.float32)
        view = faiss.rev_swig_ptr(self._flat.get_xb(), n * d).reshape(n, d)
        view.flags.writeable = False
        return view

    def version(self) -> Hashable:
        n = int(self._flat.ntotal)
        if self._mapped is None or n == 0:
            return n
        return n, int(_id_map(self._mapped)[-1])  # ids only grow: every add raises the last one

    def ids_and_keys(self) -> tuple[list[str], np.ndarray]:
        """Every stored node id and its key, in row order."""
        if self._mapped is None:
            nodes_dict = self.index.index_struct.nodes_dict
            rows = sorted(int(k) for k in nodes_dict)
            return [nodes_dict[str(r)] for r in rows], np.asarray(rows, dtype=np.int64)
        faiss_ids = self._faiss_ids()
        ids = list(faiss_ids)
        keys = np.fromiter((faiss_ids[i] for i in ids), dtype=np.int64, count=len(ids))
        order = np.argsort(keys, kind="stable")
        return [ids[r] for r in order.tolist()], keys[order]

    def _faiss_ids(self) -> Mapping[str, int]:
        store = self.index.vector_store
        assert isinstance(store, SafeFaissMapVectorStore)  # of() lends an id-mapped store only then
        return store.faiss_ids()

    def keys_of(self, node_ids: Sequence[str]) -> np.ndarray:
        if self._mapped is not None:
            faiss_ids = self._faiss_ids()
            missing = [i for i in node_ids if i not in faiss_ids]
            if missing:
                raise ValueError(f"Node {missing[0]!r} has no embedding in the FAISS index.")
            return np.fromiter((faiss_ids[i] for i in node_ids), dtype=np.int64, count=len(node_ids))
        return np.fromiter((self._row_of(i) for i in node_ids), dtype=np.int64, count=len(node_ids))

    def _row_of(self, node_id: str) -> int:
        """A plain store's row of a node: its nodes list read from the end (an insert's nodes are the last)."""
        if self._reverse is not None and node_id in self._reverse:
            return self._reverse[node_id]
        nodes_dict = self.index.index_struct.nodes_dict
        for seen, key in enumerate(reversed(nodes_dict)):
            if nodes_dict[key] == node_id:
                return int(key)
            if seen == 4096:  # not among the last rows: map them all once
                self._reverse = {v: int(k) for k, v in nodes_dict.items()}
                if node_id in self._reverse:
                    return self._reverse[node_id]
                break
        raise ValueError(f"Node {node_id!r} has no embedding in the FAISS index.")

    def rows_of(self, keys: np.ndarray, previous: np.ndarray | None = None) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.int64)
        n = int(self._flat.ntotal)
        if self._mapped is None:
            return np.where(keys < n, keys, -1)
        id_map = _id_map(self._mapped)
        if previous is not None and len(previous) == len(keys):
            ok = (previous >= 0) & (previous < n)
            if ok.all() and np.array_equal(id_map[previous], keys):
                return previous
        rows = np.searchsorted(id_map, keys)
        found = rows < n
        found[found] = id_map[rows[found]] == keys[found]
        return np.where(found, rows, -1)

    def inner_products(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        import faiss

        rows = np.ascontiguousarray(rows, dtype=np.int64)
        q = np.ascontiguousarray(query, dtype=np.float32)
        out = np.empty(len(rows), dtype=np.float32)
        xb, d = self._flat.get_xb(), int(self._flat.d)

        def part(start: int, stop: int) -> None:
            ip = faiss.fvec_inner_products_by_idx  # type: ignore[attr-defined]  # not in faiss's stubs
            ip(
                faiss.swig_ptr(out[start:stop]),
                faiss.swig_ptr(q),
                xb,
                faiss.swig_ptr(rows[start:stop]),
                d,
                1,
                stop - start,
            )

        pool = scan_pool() if len(rows) >= _PARALLEL_ROWS else None
        if pool is None:
            part(0, len(rows))
            return out
        step = -(-len(rows) // pool._max_workers)
        list(pool.map(lambda s: part(s, min(len(rows), s + step)), range(0, len(rows), step)))
        return out


def _id_map(raw: Any) -> np.ndarray:
    """An ``IndexIDMap2``'s ids by row, a read-only view of FAISS's memory."""
    import faiss

    n = int(raw.ntotal)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    view = faiss.rev_swig_ptr(raw.id_map.data(), n)
    view.flags.writeable = False
    return view


def _sorted(ids: np.ndarray) -> bool:
    return bool(ids.size < 2 or np.all(ids[1:] > ids[:-1]))
