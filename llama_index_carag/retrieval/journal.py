"""The edit journal of a persisted retriever: a later persist writes the edits since, not the whole state.

``ContextAwareRetriever.persist(dir, persist_index=True)`` writes a full *base*: LlamaIndex's storage files
(the FAISS index, ``docstore.json``, ``index_store.json``, …) and the retriever's state under ``dir/carag/``.
From then on the corpus's :class:`EditJournal` keeps each ``insert_nodes`` (the nodes as the docstore holds
them, and their vectors as the vector store holds them) and each ``delete_nodes`` (the ids) in memory, in
order.  The next persist of a retriever on that corpus to the same folder writes only those edits, as one
segment of the state's journal (:func:`~llama_index_carag.core.persistence.append_journal_segment`: the ops
as JSON lines, the vectors as one ``.npy``; committed by an atomic replace of ``carag_journal.json``).  The
base files are not touched, so a failure at any point leaves the previous state loadable.

``ContextAwareRetriever.from_persist_dir`` loads the base and replays the segments through ``insert_nodes``
and ``delete_nodes``, in the order they were made: the same code on the same state, so the retriever, its
index and its docstore end as they were when persisted (the vectors are given, nothing is embedded again).

A persist writes a full base instead when

* the journal grew past :data:`COMPACT_FRACTION` of the base's passages, or ``compact=True`` is asked;
* the folder is not the one the corpus was last persisted to or loaded from with its index, or its files
  changed since (another writer, ``storage_context.persist`` called directly);
* the settings, the fitted tables or the embed model differ from the base's, or the index was edited
  outside ``insert_nodes`` / ``delete_nodes`` (``sync``), or an edit failed half-way;
* the index is not a FAISS index (the only stores whose vectors the journal gives back bit for bit), or
  ``persist_index`` is off (the index files are then the caller's, not the package's).
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.core.persistence import (
    JOURNAL_NAME,
    MANIFEST_NAME,
    StateError,
    append_journal_segment,
    read_journal,
)
from llama_index_carag.stores.vector_stores import adapter_for, get_node_embeddings, nodes_by_id, store_size

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import BaseNode

    from llama_index_carag.settings import CaragSettings

logger = logging.getLogger(__name__)

#: A persist writes a full base once the journal holds more than this fraction of the base's passages
#: (inserted and deleted ones counted).
COMPACT_FRACTION = 0.25
#: The vector-store kinds whose index is journaled.
JOURNALED_KINDS = ("faiss", "faiss_map")


@dataclass(frozen=True)
class _Insert:
    nodes: list[dict[str, Any]]  # as LlamaIndex's docstore serialises them (doc_to_json)
    vectors: np.ndarray  # (len(nodes), d) float32, as the vector store holds them


@dataclass(frozen=True)
class _Delete:
    ids: list[str]


@dataclass
class _Base:
    """The full persist the journal extends."""

    folder: Path  # the persist dir, resolved
    state_folder: Path
    token: str  # SHA-256 of the state's manifest
    fingerprint: dict[str, list[int]]  # size, mtime and inode of every file of the folder and of the state
    settings: CaragSettings
    tables: tuple[str, ...]
    embed_model: str
    base_nodes: int  # vectors in the store at the base
    journaled: int  # nodes in the committed segments
    segments: int


def fingerprint(folder: Path, state_folder: Path) -> dict[str, list[int]]:
    """``{name: [size, mtime_ns, inode]}`` of LlamaIndex's files in a persist dir (``*.json``, the FAISS index's
    too) and of its state's manifest and journal."""
    out: dict[str, list[int]] = {}
    for path in [*folder.glob("*.json"), *(state_folder / n for n in (MANIFEST_NAME, JOURNAL_NAME))]:
        try:
            st = path.stat()
        except OSError:
            continue
        if path.is_file():
            out[str(path.relative_to(folder))] = [st.st_size, st.st_mtime_ns, st.st_ino]
    return out


class EditJournal:
    """The edits made to a corpus since it was persisted with its index (or loaded from there), in order.

    Unbound (nothing persisted yet, or the last persist was not one the journal can extend) it records
    nothing.  Held by :class:`~llama_index_carag.retrieval.fitted_corpus.FittedCorpus`, so every retriever
    sharing a corpus records its edits in the same journal.
    """

    def __init__(self) -> None:
        self._base: _Base | None = None
        self._ops: list[_Insert | _Delete] = []
        self._lock = threading.Lock()

    @property
    def bound(self) -> bool:
        """Whether a persist can write the edits as a segment (when the other conditions hold)."""
        return self._base is not None

    @property
    def pending_nodes(self) -> int:
        """Nodes inserted or deleted since the last persist (0 when unbound)."""
        return sum(len(op.nodes) if isinstance(op, _Insert) else len(op.ids) for op in self._ops)

    # ----------------------------------------------------------------------- recording
    def record_insert(self, index: VectorStoreIndex, node_ids: Sequence[str]) -> None:
        """After ``insert_nodes``: keep the inserted nodes and their stored vectors (O(batch))."""
        if self._base is None:
            return
        from llama_index.core.storage.docstore.utils import doc_to_json

        ids = list(node_ids)
        try:
            nodes = nodes_by_id(index, ids)
            _, vectors = get_node_embeddings(index, ids)
        except ValueError as exc:
            logger.info("Edit journal off until the next full persist: %s", exc)
            self.invalidate()
            return
        if any(n is None for n in nodes):
            self.invalidate()
            return
        op = _Insert([doc_to_json(n) for n in nodes if n is not None], np.asarray(vectors, dtype=np.float32))
        with self._lock:
            self._ops.append(op)

    def record_delete(self, node_ids: Sequence[str]) -> None:
        """After ``delete_nodes``: keep the ids, as given."""
        if self._base is not None:
            with self._lock:
                self._ops.append(_Delete([str(i) for i in node_ids]))

    @contextmanager
    def editing(self) -> Iterator[None]:
        """Around an edit: an exception forgets the base (the edit may be half made and cannot be replayed)."""
        try:
            yield
        except BaseException:
            self.invalidate()
            raise

    def invalidate(self) -> None:
        """Forget the base: the next persist writes a full one (after an edit the journal cannot replay)."""
        with self._lock:
            self._base, self._ops = None, []

    # ----------------------------------------------------------------------- persisting
    def bind(
        self,
        folder: Path,
        state_folder: Path,
        token: str,
        index: VectorStoreIndex,
        settings: CaragSettings,
        tables: Sequence[str],
        embed_model: str,
        *,
        base_nodes: int | None = None,
        journaled: int = 0,
        segments: int = 0,
    ) -> None:
        """Extend the state just written to, or loaded from, ``folder`` with its index (a no-op binding for
        a store the journal does not cover: the next persist is a full one)."""
        kind = adapter_for(index).kind
        size = store_size(index)
        with self._lock:
            self._ops = []
            if kind not in JOURNALED_KINDS or size is None:
                self._base = None
                return
            self._base = _Base(
                folder.resolve(),
                state_folder.resolve(),
                token,
                fingerprint(folder, state_folder),
                settings,
                tuple(sorted(tables)),
                embed_model,
                size if base_nodes is None else base_nodes,
                journaled,
                segments,
            )

    def _reason_for_full(
        self, folder: Path, state_folder: Path, settings: CaragSettings, tables: Sequence[str], embed_model: str
    ) -> str | None:
        base = self._base
        if base is None:
            return "no base to extend"
        if base.folder != folder.resolve() or base.state_folder != state_folder.resolve():
            return "another folder"
        if fingerprint(folder, base.state_folder) != base.fingerprint:
            return "the folder's files changed since the base"
        if settings != base.settings or tuple(sorted(tables)) != base.tables or embed_model != base.embed_model:
            return "other settings, fitted tables or embed model"
        if base.journaled + self.pending_nodes > COMPACT_FRACTION * max(base.base_nodes, 1):
            return f"the journal holds more than {COMPACT_FRACTION:.0%} of the base"
        return None

    def persist_edits(
        self, folder: Path, state_folder: Path, settings: CaragSettings, tables: Sequence[str], embed_model: str
    ) -> bool:
        """Write the edits since the last persist as a segment; False (nothing written) when a full persist is
        needed instead (see the module)."""
        reason = self._reason_for_full(folder, state_folder, settings, tables, embed_model)
        if reason is not None:
            logger.info("Full persist of %s: %s.", folder, reason)
            return False
        base = self._base
        assert base is not None  # checked above
        with self._lock:
            ops = list(self._ops)
        if not ops:
            logger.info("Nothing changed since the last persist of %s.", folder)
            return True
        files, n_nodes = _segment_files(ops)
        try:
            segments = append_journal_segment(
                state_folder,
                base.token,
                files,
                {"n_nodes": n_nodes, "n_ops": len(ops)},
                journal_meta={"base_nodes": base.base_nodes},
                expect_segments=base.segments,
            )
        except BaseException:
            self.invalidate()  # what is on disk is unknown to us now: the next persist is a full one
            raise
        with self._lock:
            del self._ops[: len(ops)]
            base.journaled += n_nodes
            base.segments = segments
            base.fingerprint = fingerprint(folder, state_folder)
        return True


def _segment_files(ops: Sequence[_Insert | _Delete]) -> tuple[dict[str, tuple[str, bytes]], int]:
    """The segment's files (ops as JSON lines, the inserts' vectors as one ``.npy``) and its node count."""
    lines: list[str] = []
    blocks: list[np.ndarray] = []
    row = n_nodes = 0
    for op in ops:
        if isinstance(op, _Insert):
            lines.append(json.dumps({"op": "insert", "rows": [row, row + len(op.nodes)], "nodes": op.nodes}))
            blocks.append(op.vectors)
            row += len(op.nodes)
            n_nodes += len(op.nodes)
        else:
            lines.append(json.dumps({"op": "delete", "ids": op.ids}))
            n_nodes += len(op.ids)
    dim = next((b.shape[1] for b in blocks), 0)
    vectors = np.vstack(blocks) if blocks else np.zeros((0, dim), dtype=np.float32)
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
    return {"ops": (".jsonl", "\n".join(lines).encode("utf-8")), "vectors": (".npy", buf.getvalue())}, n_nodes


def replay(
    state_folder: Path,
    token: str,
    insert: Callable[[list[BaseNode]], None],
    delete: Callable[[list[str]], None],
) -> tuple[int, int, int | None]:
    """Replay the journal of the state whose manifest has SHA-256 ``token`` through ``insert`` / ``delete``.

    Returns:
        ``(nodes journaled, segments, passages at the base or None)``.

    Raises:
        StateError: a segment file that is missing, altered or not in this format.
    """
    from llama_index.core.storage.docstore.utils import json_to_doc

    segments, meta = read_journal(state_folder, token)
    journaled = 0
    for number, segment in enumerate(segments):
        vectors = segment.array("vectors")
        try:
            lines = segment.data("ops").decode("utf-8").splitlines()
            for line in lines:
                op = json.loads(line)
                if op["op"] == "insert":
                    start, stop = (int(x) for x in op["rows"])
                    nodes = [json_to_doc(d) for d in op["nodes"]]
                    if stop - start != len(nodes) or stop > vectors.shape[0]:
                        raise ValueError("the vectors do not match the nodes")
                    for node, vector in zip(nodes, vectors[start:stop]):
                        node.embedding = vector.tolist()
                    insert(nodes)
                elif op["op"] == "delete":
                    delete([str(i) for i in op["ids"]])
                else:
                    raise ValueError(f"unknown op {op['op']!r}")
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise StateError(f"Journal segment {number} of {state_folder} is unreadable ({exc}).") from None
        journaled += int(segment.meta.get("n_nodes", 0))
    if segments:
        logger.info("Replayed %d journal segments (%d nodes) of %s", len(segments), journaled, state_folder)
    base_nodes = meta.get("base_nodes")
    return journaled, len(segments), int(base_nodes) if base_nodes is not None else None
