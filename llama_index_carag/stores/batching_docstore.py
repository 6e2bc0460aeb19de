"""A docstore wrapper that writes the nodes an insert adds in one call (see :class:`BatchingDocumentStore`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING

from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import DEFAULT_PERSIST_PATH, BaseDocumentStore, RefDocInfo
from llama_index.core.storage.kvstore.types import DEFAULT_BATCH_SIZE

if TYPE_CHECKING:  # pragma: no cover
    import fsspec

logger = logging.getLogger(__name__)


class BatchingDocumentStore(BaseDocumentStore):
    """A ``BaseDocumentStore`` that writes the nodes added inside :meth:`batch` in one call to the store it wraps.

    ``VectorStoreIndex`` adds nodes to its docstore one ``add_documents`` call at a time; a key-value docstore
    then makes one write (DuckDB: one SQL statement, one commit) per node and per hash.  Inside ``with
    store.batch():`` (the package opens one around each insert and around a build) the nodes are kept and
    written together when the outermost block ends, through the wrapped store's public ``add_documents``.  Any
    other call writes what is pending first, so reads see every node added.  Outside a batch, calls go straight
    through.

    Inside :meth:`replaying` (in the thread that opened it) writes are dropped: a reload replays edits this store
    recorded when they were made, and writing them again would undo a later edit another process made meanwhile
    (a node it deleted since would come back).

    Args:
        inner: the docstore written to.
        get_many: reads many nodes in one query (``{id: node}``, missing ids left out); default the wrapped
            store's ``get_nodes``.
        write_batch_size: the ``batch_size`` given to the wrapped store's ``add_documents`` when pending nodes
            are written (Redis: the HSETs of one pipelined transaction); default the store's own (LlamaIndex's
            in-memory key-value store accepts no other).
    """

    def __init__(
        self,
        inner: BaseDocumentStore,
        get_many: Callable[[list[str]], dict[str, BaseNode]] | None = None,
        *,
        write_batch_size: int | None = None,
    ) -> None:
        self._inner = inner
        self._get_many = get_many
        self._write_batch_size = write_batch_size
        self._lock = threading.RLock()
        self._depth = 0
        self._pending: dict[str, BaseNode] = {}
        self._store_text = True
        self._replay = threading.local()

    @property
    def _dropping(self) -> bool:
        return bool(getattr(self._replay, "depth", 0))

    @contextmanager
    def replaying(self) -> Iterator[None]:
        """Drop the writes this thread makes in the block (the store holds them already; see the class)."""
        self.flush()
        self._replay.depth = getattr(self._replay, "depth", 0) + 1
        try:
            yield
        finally:
            self._replay.depth -= 1

    @property
    def inner(self) -> BaseDocumentStore:
        """The wrapped docstore, with every pending node written to it."""
        self.flush()
        return self._inner

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Keep the nodes added in the block and write them together when the outermost block ends."""
        with self._lock:
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self.flush()

    def flush(self) -> None:
        """Write the pending nodes to the wrapped store in one ``add_documents`` call (no-op when none)."""
        with self._lock:
            if not self._pending:
                return
            nodes = list(self._pending.values())
            sized = {} if self._write_batch_size is None else {"batch_size": self._write_batch_size}
            self._inner.add_documents(nodes, allow_update=True, store_text=self._store_text, **sized)
            self._pending.clear()
            logger.debug("Wrote %d nodes to %s in one call", len(nodes), type(self._inner).__name__)

    # -- writes ----------------------------------------------------------------------------------------------

    def add_documents(
        self,
        docs: Sequence[BaseNode],
        allow_update: bool = True,
        batch_size: int = DEFAULT_BATCH_SIZE,
        store_text: bool = True,
    ) -> None:
        if self._dropping:
            return
        with self._lock:
            if self._depth == 0 or not allow_update:
                self.flush()
                self._inner.add_documents(docs, allow_update=allow_update, batch_size=batch_size, store_text=store_text)
                return
            if store_text != self._store_text:
                self.flush()
                self._store_text = store_text
            for doc in docs:
                self._pending.pop(doc.node_id, None)
                self._pending[doc.node_id] = doc

    async def async_add_documents(
        self,
        docs: Sequence[BaseNode],
        allow_update: bool = True,
        batch_size: int = DEFAULT_BATCH_SIZE,
        store_text: bool = True,
    ) -> None:
        self.add_documents(docs, allow_update=allow_update, batch_size=batch_size, store_text=store_text)

    def delete_document(self, doc_id: str, raise_error: bool = True) -> None:
        if self._dropping:
            return
        self.inner.delete_document(doc_id, raise_error=raise_error)

    async def adelete_document(self, doc_id: str, raise_error: bool = True) -> None:
        if self._dropping:
            return
        await self.inner.adelete_document(doc_id, raise_error=raise_error)

    def delete_ref_doc(self, ref_doc_id: str, raise_error: bool = True) -> None:
        if self._dropping:
            return
        self.inner.delete_ref_doc(ref_doc_id, raise_error=raise_error)

    async def adelete_ref_doc(self, ref_doc_id: str, raise_error: bool = True) -> None:
        if self._dropping:
            return
        await self.inner.adelete_ref_doc(ref_doc_id, raise_error=raise_error)

    def set_document_hash(self, doc_id: str, doc_hash: str) -> None:
        if self._dropping:
            return
        self.inner.set_document_hash(doc_id, doc_hash)

    async def aset_document_hash(self, doc_id: str, doc_hash: str) -> None:
        if self._dropping:
            return
        await self.inner.aset_document_hash(doc_id, doc_hash)

    def set_document_hashes(self, doc_hashes: dict[str, str]) -> None:
        if self._dropping:
            return
        self.inner.set_document_hashes(doc_hashes)

    async def aset_document_hashes(self, doc_hashes: dict[str, str]) -> None:
        if self._dropping:
            return
        await self.inner.aset_document_hashes(doc_hashes)

    def persist(self, persist_path: str = DEFAULT_PERSIST_PATH, fs: fsspec.AbstractFileSystem | None = None) -> None:
        self.inner.persist(persist_path=persist_path, fs=fs)

    # -- reads -----------------------------------------------------------------------------------------------

    @property
    def docs(self) -> dict[str, BaseNode]:
        return self.inner.docs

    def get_document(self, doc_id: str, raise_error: bool = True) -> BaseNode | None:
        return self.inner.get_document(doc_id, raise_error=raise_error)

    async def aget_document(self, doc_id: str, raise_error: bool = True) -> BaseNode | None:
        return await self.inner.aget_document(doc_id, raise_error=raise_error)

    def get_nodes(self, node_ids: list[str], raise_error: bool = True) -> list[BaseNode]:
        if self._get_many is None:
            return self.inner.get_nodes(node_ids, raise_error=raise_error)
        self.flush()
        found = self._get_many(list(node_ids))
        missing = [i for i in node_ids if i not in found]
        if missing and raise_error:
            raise ValueError(f"node_id {missing[0]} not found.")
        return [found[i] for i in node_ids if i in found]

    async def aget_nodes(self, node_ids: list[str], raise_error: bool = True) -> list[BaseNode]:
        return self.get_nodes(node_ids, raise_error=raise_error)

    def document_exists(self, doc_id: str) -> bool:
        return self.inner.document_exists(doc_id)

    async def adocument_exists(self, doc_id: str) -> bool:
        return await self.inner.adocument_exists(doc_id)

    def get_document_hash(self, doc_id: str) -> str | None:
        return self.inner.get_document_hash(doc_id)

    async def aget_document_hash(self, doc_id: str) -> str | None:
        return await self.inner.aget_document_hash(doc_id)

    def get_all_document_hashes(self) -> dict[str, str]:
        return self.inner.get_all_document_hashes()

    async def aget_all_document_hashes(self) -> dict[str, str]:
        return await self.inner.aget_all_document_hashes()

    def get_all_ref_doc_info(self) -> dict[str, RefDocInfo] | None:
        return self.inner.get_all_ref_doc_info()

    async def aget_all_ref_doc_info(self) -> dict[str, RefDocInfo] | None:
        return await self.inner.aget_all_ref_doc_info()

    def get_ref_doc_info(self, ref_doc_id: str) -> RefDocInfo | None:
        return self.inner.get_ref_doc_info(ref_doc_id)

    async def aget_ref_doc_info(self, ref_doc_id: str) -> RefDocInfo | None:
        return await self.inner.aget_ref_doc_info(ref_doc_id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._inner!r}, pending={len(self._pending)})"


def docstore_replay(docstore: BaseDocumentStore) -> AbstractContextManager[None]:
    """``docstore.replaying()`` for a :class:`BatchingDocumentStore` (DuckDB, Redis), else a block that does
    nothing (an in-memory docstore is the process's own: replaying into it is how it is rebuilt)."""
    if isinstance(docstore, BatchingDocumentStore):
        return docstore.replaying()
    return nullcontext()


def docstore_batch(docstore: BaseDocumentStore) -> AbstractContextManager[None]:
    """``docstore.batch()`` for a :class:`BatchingDocumentStore`, else a block that does nothing."""
    if isinstance(docstore, BatchingDocumentStore):
        return docstore.batch()
    return nullcontext()
