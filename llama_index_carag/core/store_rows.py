"""Vectors a vector store lends in place: the :class:`StoreRows` protocol and :class:`StackedRows`.

A flat vector store (FAISS ``IndexFlat``, alone or under ``IndexIDMap2``) already holds every passage's
vector in one matrix.  A context fitted on such a store keeps only each passage's *key* (the store's stable
id for it) and reads the vector from the store when it needs one, instead of a second copy of the corpus
(1.5 GB at a million 384-d vectors).

* :class:`StoreRows` is what a store adapter lends: its matrix (re-read after every write: the store may
  reallocate it), stable keys of node ids, the current rows of keys, and inner products by row.
* :class:`StackedRows` is the matrix a context is fitted on: the store's evidence rows followed by the claims'
  own vectors, read as one ``(n, d)`` matrix without stacking them.
* :class:`StoreHits` is the store's answer to a top-k search by inner product, which says something about every
  row it did not return too: none scores above the last hit.  A query's dense search hands it to the SOI,
  which then need not scan its cluster (:meth:`~llama_index_carag.core.row_clusters.RowClusterStore.query_members`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class StoreRows(Protocol):
    """A vector store's own rows, lent to a fitted context (see the module docstring).

    Rows are raw (not normalised) float32 vectors.  A key never changes while its vector is stored; a row may
    (a delete compacts the matrix).  As for the store's own search, a query must not run while the store is
    being written.
    """

    @property
    def dim(self) -> int:
        """The vectors' dimension."""

    def bounds_rows(self, hits: StoreHits) -> bool:
        """Whether ``hits`` are this store's own answer, scored by inner product (then no row they do not hold
        scores above :attr:`StoreHits.bound`)."""

    def matrix(self) -> np.ndarray:
        """Every stored vector, ``(ntotal, d)`` float32, read-only, in place: valid until the next write."""

    def version(self) -> Hashable:
        """A value that changes whenever rows are added or removed (cheap: read per query)."""

    def ids_and_keys(self) -> tuple[list[str], np.ndarray]:
        """Every stored node id and its key (int64), in row order."""

    def keys_of(self, node_ids: Sequence[str]) -> np.ndarray:
        """The stable keys of stored nodes, int64, in the order of ``node_ids``.

        Raises:
            ValueError: a node has no stored vector.
        """

    def rows_of(self, keys: np.ndarray, previous: np.ndarray | None = None) -> np.ndarray:
        """The current rows of ``keys`` (``-1`` for a key no longer stored), int64; ``previous``: the rows they
        had at an earlier version, checked first (a store that only appended keeps them)."""

    def inner_products(self, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
        """``matrix()[rows] @ query`` without the gathered copy, float32 shape ``(len(rows),)``; ``-inf`` at a
        row ``-1``."""


@dataclass(frozen=True)
class StoreHits:
    """A vector store's answer to a top-``limit`` search: the node ids found, best first, their scores, and the
    search vector's norm.  When the store scores by inner product (:meth:`StoreRows.bounds_rows`), every stored
    row not among the hits scores at most :attr:`bound`."""

    ids: list[str]
    scores: np.ndarray
    query_norm: float
    limit: int
    store: object  # the vector store that answered (compared by identity)

    @property
    def bound(self) -> float:
        """The highest score a row not among the hits can have: the last hit's, or ``-inf`` when fewer than
        ``limit`` came back (the store has no other row)."""
        if len(self.ids) < self.limit:
            return float("-inf")
        return float(self.scores[-1]) if len(self.scores) else float("inf")


class StackedRows:
    """The store's rows at ``positions`` (all rows, in order, when ``None``) followed by ``owned`` rows, read as
    one ``(n, d)`` float32 matrix without stacking them: slices and integer-array indexing give new arrays
    (a slice of store rows alone is a read-only view).

    Args:
        store: the lending store.
        keys: the stable keys of the store rows taken, shape ``(n_store,)``.
        positions: their current rows, or ``None`` for every row in order.
        owned: the rows that follow, shape ``(m, d)`` (the claims).
    """

    def __init__(self, store: StoreRows, keys: np.ndarray, positions: np.ndarray | None, owned: np.ndarray) -> None:
        self.store = store
        self.keys = np.asarray(keys, dtype=np.int64)
        self.positions = positions
        self._matrix = store.matrix()
        self.n_store = len(self.keys)
        d = self._matrix.shape[1]
        self.owned = np.asarray(owned, dtype=np.float32).reshape(-1, d)
        self.shape = (self.n_store + self.owned.shape[0], d)
        self.dtype = np.dtype(np.float32)

    def __len__(self) -> int:
        return self.shape[0]

    def _store_rows(self, rows: np.ndarray) -> np.ndarray:
        return self._matrix[rows if self.positions is None else self.positions[rows]]

    def __getitem__(self, index: slice | np.ndarray | Sequence[int]) -> np.ndarray:
        if isinstance(index, slice):
            start, stop, step = index.indices(self.shape[0])
            if step != 1:
                raise IndexError("StackedRows supports slices with step 1 only.")
            stop = max(start, stop)
            if stop <= self.n_store:
                if self.positions is None:
                    return self._matrix[start:stop]
                return self._matrix[self.positions[start:stop]]
            if start >= self.n_store:
                return self.owned[start - self.n_store : stop - self.n_store]
            return np.vstack([self[start : self.n_store], self.owned[: stop - self.n_store]])
        rows = np.asarray(index, dtype=np.int64)
        if rows.ndim != 1:
            raise IndexError("StackedRows takes a slice or a one-dimensional array of rows.")
        out = np.empty((len(rows), self.shape[1]), dtype=np.float32)
        in_store = rows < self.n_store
        out[in_store] = self._store_rows(rows[in_store])
        out[~in_store] = self.owned[rows[~in_store] - self.n_store]
        return out
