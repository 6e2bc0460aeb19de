"""Several processes on one index: one writer, readers that know when they are behind.

A process holds its own copy of an index's vectors (FAISS), fitted clusters and BM25 tables.  Another process's
edits reach it only through what both share: the persisted folder (at the writer's ``persist``) and, for a
Redis docstore, the passages' text at once (without their vectors: see docs/GUIDE.md, "Several processes").
:class:`SharedIndex` (one per index object, :func:`shared_index_of`) keeps a retriever honest about that:

* **one writer per folder**: the first edit (``insert_nodes``, ``delete_nodes``, ``refit``) of a retriever
  loaded from or persisted to a folder takes the folder's writer lock
  (:mod:`~llama_index_carag.core.writer_lock`) and keeps it until its edits are persisted; a ``persist`` holds
  it while it writes.  A second process gets :class:`~llama_index_carag.core.writer_lock.IndexBusyError`.
* **no stale writer**: the folder's *stamp* (size, mtime and inode of the state's manifest and journal, which
  every persist replaces) is taken when the retriever loads or persists.  An edit or a persist by a retriever
  whose folder another writer persisted since raises :class:`IndexChangedError` instead of overwriting those
  edits with an older copy.
* **the shared docstore's generation**: on a Redis docstore every edit first moves the namespace's generation
  from the value this process knows to the next one, in one atomic step
  (:func:`~llama_index_carag.stores.docstores.advance_docstore_generation`); an edit on a docstore another
  process edited since raises :class:`IndexChangedError` before anything is written.
* **readers**: :meth:`SharedIndex.changed_elsewhere` says whether the folder or the docstore changed since the
  retriever loaded it; queries check it at most every :data:`POLL_INTERVAL_S` seconds and log one warning per
  kind of change.  Reloading (``ContextAwareRetriever.from_persist_dir``) brings a reader up to date.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from llama_index_carag.core.commit import roll_forward
from llama_index_carag.core.persistence import JOURNAL_NAME, MANIFEST_NAME, StateError
from llama_index_carag.core.writer_lock import acquire_writer, release_all, release_writer
from llama_index_carag.stores.docstores import advance_docstore_generation, docstore_generation, docstore_replay

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.storage.docstore.types import BaseDocumentStore

logger = logging.getLogger(__name__)

#: Queries look for another writer's changes at most this often (seconds): two ``stat`` calls and, on Redis,
#: one ``GET``.
POLL_INTERVAL_S = 1.0

Stamp = tuple[tuple[int, int, int] | None, ...]


class IndexChangedError(StateError):
    """Another writer persisted the folder, or edited the shared docstore, since this retriever loaded it."""


def folder_stamp(folder: str | os.PathLike[str], subdir: str = "carag") -> Stamp:
    """``(size, mtime_ns, inode)`` of the state's manifest and journal in ``folder`` (``None`` for a missing
    file): every persist replaces one of them, so the stamp changes with each persist."""
    out: list[tuple[int, int, int] | None] = []
    for name in (MANIFEST_NAME, JOURNAL_NAME):
        try:
            st = (Path(folder) / subdir / name).stat()
        except OSError:
            out.append(None)
            continue
        out.append((st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


def load_stamp(folder: str | os.PathLike[str], subdir: str = "carag") -> Stamp:
    """The stamp a load starts from, taken before it reads (a persist during the load then reads as a change):
    an interrupted commit is finished first, as the load itself does."""
    try:
        roll_forward(folder)
    except (OSError, ValueError):  # the load reports it
        pass
    return folder_stamp(folder, subdir)


class SharedIndex:
    """What one index object knows of the folder and docstore it shares with other processes (see the module)."""

    def __init__(self, docstore: BaseDocumentStore) -> None:
        self._docstore = docstore
        self._token = uuid.uuid4().hex
        self._lock = threading.RLock()
        self.folder: Path | None = None
        self.subdir = "carag"
        self.stamp: Stamp | None = None
        self.generation: int | None = docstore_generation(docstore)
        self.holding = False  # the folder's writer lock, kept until the edits are persisted
        self._pause = threading.local()  # per thread: another thread's edit meanwhile is still checked
        self._last_poll = 0.0
        self._warned: set[str] = set()
        self._finalizer: weakref.finalize | None = None

    # ------------------------------------------------------------------------------- binding
    def bind(self, folder: str | os.PathLike[str], subdir: str, stamp: Stamp | None = None) -> None:
        """The retriever was loaded from ``folder`` or persisted to it: later edits and persists are checked
        against its stamp (``stamp`` as taken before a load; default the folder's now)."""
        with self._lock:
            target = Path(folder).expanduser().resolve()
            if self.holding and self.folder is not None and self.folder != target:
                self._release()
            self.folder, self.subdir = target, subdir
            self.stamp = folder_stamp(target, subdir) if stamp is None else stamp
            self._warned.discard("folder")

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Edits this thread makes in the block are not the process's own (a journal replayed, a docstore
        reconciled): no lock, no check, no generation moved, and nothing written to a shared docstore
        (:func:`~llama_index_carag.stores.docstores.docstore_replay`: it holds them already)."""
        self._pause.depth = self._paused + 1
        try:
            with docstore_replay(self._docstore):
                yield
        finally:
            self._pause.depth -= 1

    @property
    def _paused(self) -> int:
        return int(getattr(self._pause, "depth", 0))

    # ------------------------------------------------------------------------------- writing
    def start_edit(self) -> None:
        """Before an edit: become the folder's writer and check that nobody else wrote since.

        Raises:
            IndexBusyError: another process edits the folder.
            IndexChangedError: the folder or the shared docstore changed since this retriever loaded it.
        """
        with self._lock:
            if self._paused:
                return
            taken = False
            if self.folder is not None and not self.holding:
                taken = acquire_writer(self.folder, self._token)
                self._track_release()
            try:
                self._check_folder()
                self._claim_docstore()
            except BaseException:
                if taken:
                    release_writer(self.folder, self._token)  # type: ignore[arg-type]
                raise
            if self.folder is not None:
                self.holding = True

    @contextmanager
    def persisting(self, folder: str | os.PathLike[str], subdir: str) -> Iterator[None]:
        """Around a persist into ``folder``: its writer lock held, a stale copy refused; the edits persisted, the
        lock is given back and the retriever is bound to ``folder``.

        Raises:
            IndexBusyError: another process edits ``folder``.
            IndexChangedError: this retriever's copy of ``folder`` is stale (another writer persisted it since).
        """
        target = Path(folder).expanduser().resolve()
        with self._lock:
            taken = acquire_writer(target, self._token)
            self._track_release()
            try:
                if target == self.folder and not self._paused:
                    self._check_folder()
                yield
            except BaseException:
                if taken:  # held for this persist only
                    release_writer(target, self._token)
                raise
            self.bind(target, subdir)
            self._release()

    def _check_folder(self) -> None:
        if self.folder is None or self.stamp is None:
            return
        if folder_stamp(self.folder, self.subdir) != self.stamp:
            raise IndexChangedError(
                f"{self.folder} was persisted by another writer since this retriever loaded or persisted it: "
                "its edits are not in this copy, and writing from it would undo them. Reload it with "
                "ContextAwareRetriever.from_persist_dir and edit again."
            )

    def _claim_docstore(self) -> None:
        if self.generation is None:
            return
        claimed = advance_docstore_generation(self._docstore, self.generation)
        if claimed is None:
            return
        ok, value = claimed
        if not ok:
            raise IndexChangedError(
                f"The shared docstore was edited by another process since this retriever loaded it (generation "
                f"{value}, this copy is in line with {self.generation}): the passages it inserted have no vector "
                "here and those it deleted are still here. Reload with ContextAwareRetriever.from_persist_dir "
                "(one process should edit an index: docs/GUIDE.md, Several processes)."
            )
        self.generation = value

    def in_line_with_docstore(self, generation: int | None) -> None:
        """The retriever was brought in line with the docstore as it was at ``generation`` (a reconcile)."""
        with self._lock:
            if generation is not None:
                self.generation = generation
                self._warned.discard("docstore")

    def _release(self) -> None:
        if self.folder is not None:
            release_writer(self.folder, self._token)
        self.holding = False

    def _track_release(self) -> None:
        """Give every lock back when the index object goes (weakly: the finalizer holds no reference to self)."""
        if self._finalizer is None:
            self._finalizer = weakref.finalize(self, release_all, self._token)

    # ------------------------------------------------------------------------------- reading
    def changed_elsewhere(self) -> str | None:
        """What another writer changed since this retriever loaded (or persisted) its index; ``None`` when nothing."""
        reasons = [text for _, text in self._changes()]
        return " ".join(reasons) or None

    def _changes(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        folder, stamp, expected = self.folder, self.stamp, self.generation  # no lock: a persist may hold it long
        if folder is not None and stamp is not None and folder_stamp(folder, self.subdir) != stamp:
            out.append(("folder", f"{folder} was persisted by another writer since this retriever loaded it."))
        if expected is not None:
            current = docstore_generation(self._docstore)
            if current is not None and current != expected:
                out.append(
                    (
                        "docstore",
                        f"The shared docstore was edited by another process (generation {current}; this retriever "
                        f"is in line with {expected}): its inserts are not retrieved here and its deletes are "
                        "dropped from the results.",
                    )
                )
        return out

    def poll(self) -> None:
        """At most every :data:`POLL_INTERVAL_S`: log one warning per kind of change another writer made."""
        now = time.monotonic()
        if now - self._last_poll < POLL_INTERVAL_S:
            return
        self._last_poll = now
        try:
            changes = self._changes()
        except Exception as exc:  # a docstore that cannot be reached: the query itself reports it
            logger.debug("Could not check for another writer's changes: %s", exc)
            return
        for kind, text in changes:
            if kind not in self._warned:
                self._warned.add(kind)
                logger.warning(
                    "%s Reload it (ContextAwareRetriever.from_persist_dir) to serve them; carag serve does so itself.",
                    text,
                )


_SHARED: weakref.WeakKeyDictionary[VectorStoreIndex, SharedIndex] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def shared_index_of(index: VectorStoreIndex) -> SharedIndex:
    """The :class:`SharedIndex` of an index object (made on first use, reading the docstore's generation then)."""
    with _SHARED_LOCK:
        shared = _SHARED.get(index)
        if shared is None:
            shared = _SHARED[index] = SharedIndex(index.docstore)
        return shared
