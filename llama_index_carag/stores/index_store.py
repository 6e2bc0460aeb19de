"""An index store that writes LlamaIndex's index struct when it is read, not on every edit.

``VectorStoreIndex.insert_nodes`` and ``delete_nodes`` end with ``index_store.add_index_struct(index_struct)``;
LlamaIndex's key-value index stores serialise the whole ``IndexDict`` there (one ``nodes_dict`` entry per
passage, through ``dataclasses_json``): at 100k passages that is most of an edit of 1,000 passages, O(corpus)
for an O(batch) change.

:class:`DeferredIndexStore` is a ``BaseIndexStore`` that wraps another one (by default LlamaIndex's in-memory
``SimpleIndexStore``) and keeps the latest ``IndexDict`` added per ``index_id`` in memory.  It writes the pending
structs to the wrapped store, through that store's public ``add_index_struct``, before anything reads, deletes,
exports or persists, so what it hands out and what it saves are what the wrapped store would hold had each edit
been written at once.  Other structs are written through at once.  The package uses it for the indexes it
builds or loads itself (:func:`~llama_index_carag.retrieval.indexing.build_faiss_index`, the FAISS and simple
stores' ``load_index``); an index a user passes in keeps the index store it was built with.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from llama_index.core.data_structs.data_structs import IndexDict
from llama_index.core.storage.index_store.simple_index_store import SimpleIndexStore
from llama_index.core.storage.index_store.types import DEFAULT_PERSIST_DIR, DEFAULT_PERSIST_PATH, BaseIndexStore

if TYPE_CHECKING:  # pragma: no cover
    import fsspec
    from llama_index.core.data_structs.data_structs import IndexStruct


class DeferredIndexStore(BaseIndexStore):
    """A ``BaseIndexStore`` that defers writing an ``IndexDict`` until the store is read (see the module).

    Args:
        inner: the index store written to (default: a new ``SimpleIndexStore``).  Read it through
            :attr:`inner`, which writes what is pending first.
    """

    def __init__(self, inner: BaseIndexStore | None = None) -> None:
        self._inner: BaseIndexStore = inner if inner is not None else SimpleIndexStore()
        self._pending: dict[str, IndexStruct] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_persist_dir(
        cls, persist_dir: str = DEFAULT_PERSIST_DIR, fs: fsspec.AbstractFileSystem | None = None
    ) -> DeferredIndexStore:
        """Wrap the ``SimpleIndexStore`` that LlamaIndex persisted in ``persist_dir``."""
        return cls(SimpleIndexStore.from_persist_dir(persist_dir, fs=fs))

    @property
    def inner(self) -> BaseIndexStore:
        """The wrapped index store, with every pending struct written to it."""
        self.flush()
        return self._inner

    @property
    def pending(self) -> list[str]:
        """The ids of the index structs not written to the wrapped store yet."""
        with self._lock:
            return list(self._pending)

    def flush(self) -> None:
        """Write the pending index structs to the wrapped store (no-op when none is pending)."""
        with self._lock:
            while self._pending:
                index_id = next(iter(self._pending))
                self._inner.add_index_struct(self._pending[index_id])
                del self._pending[index_id]  # after the write: a failed write stays pending

    async def aflush(self) -> None:
        """:meth:`flush` through the wrapped store's ``async_add_index_struct``."""
        while True:
            with self._lock:
                if not self._pending:
                    return
                index_id, struct = next(iter(self._pending.items()))
            await self._inner.async_add_index_struct(struct)
            with self._lock:
                if self._pending.get(index_id) is struct:
                    del self._pending[index_id]

    def _defer(self, index_struct: IndexStruct) -> bool:
        if type(index_struct) is not IndexDict:
            return False
        with self._lock:
            self._pending.pop(index_struct.index_id, None)  # re-inserted last: flushed in the order added
            self._pending[index_struct.index_id] = index_struct
        return True

    # -- BaseIndexStore --------------------------------------------------------------------------------

    def add_index_struct(self, index_struct: IndexStruct) -> None:
        if not self._defer(index_struct):
            self.flush()
            self._inner.add_index_struct(index_struct)

    async def async_add_index_struct(self, index_struct: IndexStruct) -> None:
        if not self._defer(index_struct):
            await self.aflush()
            await self._inner.async_add_index_struct(index_struct)

    def delete_index_struct(self, key: str) -> None:
        self.flush()
        self._inner.delete_index_struct(key)

    async def adelete_index_struct(self, key: str) -> None:
        await self.aflush()
        await self._inner.adelete_index_struct(key)

    def get_index_struct(self, struct_id: str | None = None) -> IndexStruct | None:
        self.flush()
        return self._inner.get_index_struct(struct_id)

    async def aget_index_struct(self, struct_id: str | None = None) -> IndexStruct | None:
        await self.aflush()
        return await self._inner.aget_index_struct(struct_id)

    def index_structs(self) -> list[IndexStruct]:
        self.flush()
        return self._inner.index_structs()

    async def async_index_structs(self) -> list[IndexStruct]:
        await self.aflush()
        return await self._inner.async_index_structs()

    def persist(self, persist_path: str = DEFAULT_PERSIST_PATH, fs: fsspec.AbstractFileSystem | None = None) -> None:
        self.flush()
        self._inner.persist(persist_path=persist_path, fs=fs)

    def to_dict(self) -> dict[str, Any]:
        """The wrapped store's ``to_dict()`` (a ``SimpleIndexStore``'s export), pending structs written first.

        Raises:
            TypeError: the wrapped store has no ``to_dict``.
        """
        to_dict = getattr(self.inner, "to_dict", None)
        if to_dict is None:
            raise TypeError(f"{type(self._inner).__name__} has no to_dict().")
        result: dict[str, Any] = to_dict()
        return result

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._inner!r}, pending={self.pending})"
