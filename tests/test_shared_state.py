"""Several processes on one index (docs/GUIDE.md, "Several processes"): one writer, readers that know they are behind.

Every claim here is about processes, so the other process is a real one: a child Python that loads the index and
answers JSON commands on its stdin (``_Peer``).  The test process is the first writer.  Loopback only: the Redis
tests start ``redis-server`` on 127.0.0.1 (``tests/test_docstores.py``'s fixture) and skip without it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import TextNode

from llama_index_carag.core import writer_lock
from llama_index_carag.core.writer_lock import (
    LOCK_NAME,
    IndexBusyError,
    acquire_writer,
    holds_writer,
    release_writer,
    writer_holder,
)
from llama_index_carag.retrieval import shared_index
from llama_index_carag.retrieval.indexing import build_faiss_index
from llama_index_carag.retrieval.retriever import ContextAwareRetriever
from llama_index_carag.retrieval.shared_index import IndexChangedError
from llama_index_carag.stores.docstores import docstore_node_ids, open_docstore
from llama_index_carag.stores.vector_stores import index_node_ids
from tests.helpers import TableEmbedding
from tests.test_docstores import redis_server  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[1]
DIM = 16
N = 60
TIMEOUT_S = 120


def _embed() -> TableEmbedding:
    return TableEmbedding({"probe": [1.0] + [0.0] * (DIM - 1)})


def _node(i: int, prefix: str = "e") -> TextNode:
    return TextNode(id_=f"{prefix}{i}", text=f"{prefix} passage {i} about topic {i % 5}")


def _build(folder: Path, spec: str | None = None) -> None:
    store = open_docstore(spec, folder)
    index = build_faiss_index([_node(i) for i in range(N)], _embed(), id_map=True, docstore=store)
    ContextAwareRetriever.from_index(index, n_clusters=3, similarity_top_k=5, random_state=0).persist(
        folder, persist_index=True
    )


def _load(folder: Path) -> ContextAwareRetriever:
    return ContextAwareRetriever.from_persist_dir(folder, embed_model=_embed())


def _ids(retriever: ContextAwareRetriever, query: str) -> list[str]:
    return [n.node.node_id for n in retriever.retrieve(query)]


_PEER = """
import json, sys
from pathlib import Path
from llama_index.core.schema import TextNode
from tests.helpers import TableEmbedding
from llama_index_carag.retrieval.retriever import ContextAwareRetriever
from llama_index_carag.stores.docstores import docstore_node_ids
from llama_index_carag.stores.vector_stores import index_node_ids
embed = TableEmbedding({"probe": [1.0] + [0.0] * (DIM - 1)})
r = None
print(json.dumps({"ok": "ready"}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    op, arg = cmd["op"], cmd.get("arg")
    try:
        if op == "load":
            r = ContextAwareRetriever.from_persist_dir(Path(arg), embed_model=embed); out = None
        elif op == "insert":
            prefix, n = arg
            r.insert_nodes([TextNode(id_=f"{prefix}{i}", text=f"{prefix} passage {i} about topic {i % 5}")
                            for i in range(n)]); out = None
        elif op == "delete":
            r.delete_nodes(arg); out = None
        elif op == "persist":
            r.persist(arg, persist_index=True); out = None
        elif op == "changed":
            out = r.changed_elsewhere()
        elif op == "ids":
            out = {"vectors": sorted(index_node_ids(r.index)), "docstore": sorted(docstore_node_ids(r.index.docstore))}
        elif op == "retrieve":
            out = [n.node.node_id for n in r.retrieve(arg)]
        else:
            raise ValueError(op)
        print(json.dumps({"ok": out}), flush=True)
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
""".replace("DIM", str(DIM))


class _Peer:
    """Another process with its own retriever, driven one JSON command at a time."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(_PEER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert self._read() == {"ok": "ready"}

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the peer process exited ({self.proc.poll()})"
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, op: str, arg: Any = None) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "arg": arg}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def ok(self, op: str, arg: Any = None) -> Any:
        answer = self.ask(op, arg)
        assert "ok" in answer, answer
        return answer["ok"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=TIMEOUT_S)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def peer() -> Any:
    p = _Peer()
    yield p
    p.close()


# -- the lock itself ------------------------------------------------------------------------------------------

_HOLDER = """
import sys, time
from llama_index_carag.core.writer_lock import acquire_writer
acquire_writer(sys.argv[1], "child")
print("HELD", flush=True)
time.sleep(600)
"""


def test_a_second_process_is_refused_and_a_killed_writer_leaves_no_lock(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "HELD"
        holder = writer_holder(tmp_path)
        assert holder is not None and holder["pid"] == child.pid
        with pytest.raises(IndexBusyError, match=f"process {child.pid} on "):
            acquire_writer(tmp_path, "me")
        child.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel drops the lock with the process
        child.wait(timeout=TIMEOUT_S)
        assert writer_holder(tmp_path) is None
        assert acquire_writer(tmp_path, "me") and holds_writer(tmp_path, "me")
        assert writer_holder(tmp_path)["pid"] == os.getpid()  # type: ignore[index]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        release_writer(tmp_path, "me")
    assert writer_holder(tmp_path) is None and (tmp_path / LOCK_NAME).is_file()


def test_owners_in_one_process_share_the_lock(tmp_path: Path) -> None:
    assert acquire_writer(tmp_path, "a") and acquire_writer(tmp_path, "b")
    assert not acquire_writer(tmp_path, "a")  # asked again: a no-op
    release_writer(tmp_path, "a")
    assert writer_holder(tmp_path) is not None  # "b" still holds it
    release_writer(tmp_path, "b")
    assert writer_holder(tmp_path) is None


# -- one folder, LlamaIndex's in-memory docstore ---------------------------------------------------------------


def test_one_writer_per_folder_and_no_stale_overwrite(tmp_path: Path, peer: _Peer) -> None:
    """Before: the second process's persist silently rewrote the folder without the first one's edits."""
    _build(tmp_path)
    writer = _load(tmp_path)
    peer.ok("load", str(tmp_path))
    writer.insert_nodes([_node(i, "new") for i in range(4)])  # the writer lock: held until persisted
    refused = peer.ask("insert", ["bee", 2])
    assert refused["error"] == "IndexBusyError" and f"process {os.getpid()}" in refused["message"]
    assert peer.ok("changed") is None  # an in-memory docstore: unpersisted edits are the writer's alone
    writer.delete_nodes(["e1"])
    writer.persist(tmp_path, persist_index=True)  # gives the lock back
    assert writer_holder(tmp_path) is None
    assert "was persisted by another writer" in peer.ok("changed")
    for op, arg in [("insert", ["bee", 2]), ("persist", str(tmp_path))]:
        stale = peer.ask(op, arg)  # a stale copy would undo the writer's edits: refused
        assert stale["error"] == "IndexChangedError" and "Reload" in stale["message"], stale
    assert writer.changed_elsewhere() is None
    peer.ok("load", str(tmp_path))  # reloaded: the writer's edits, with their vectors
    ids = peer.ok("ids")
    assert ids["vectors"] == sorted(index_node_ids(writer.index)) and "new3" in ids["vectors"]
    assert "e1" not in ids["vectors"] and peer.ok("changed") is None
    assert peer.ok("retrieve", "new passage 3 about topic 3") == _ids(writer, "new passage 3 about topic 3")
    peer.ok("insert", ["bee", 2])  # now the peer is the writer
    peer.ok("persist", str(tmp_path))
    with pytest.raises(IndexChangedError, match="persisted by another writer"):
        writer.insert_nodes([_node(9, "late")])
    assert writer_holder(tmp_path) is None  # the refused edit took no lock
    assert {"bee0", "bee1", "new0"} <= set(index_node_ids(_load(tmp_path).index))


def test_a_reader_logs_one_warning_when_the_writer_persists(
    tmp_path: Path, peer: _Peer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _build(tmp_path)
    reader = _load(tmp_path)
    peer.ok("load", str(tmp_path))
    peer.ok("insert", ["new", 2])
    peer.ok("persist", str(tmp_path))
    monkeypatch.setattr(shared_index, "POLL_INTERVAL_S", 0.0)
    with caplog.at_level(logging.WARNING, logger="llama_index_carag.retrieval.shared_index"):
        for _ in range(3):
            assert "new0" not in _ids(reader, "new passage 0 about topic 0")  # not until it reloads
    warnings = [r.getMessage() for r in caplog.records if "another writer" in r.getMessage()]
    assert len(warnings) == 1 and "Reload it" in warnings[0]
    assert "new0" in _ids(_load(tmp_path), "new passage 0 about topic 0")


# -- a Redis docstore -----------------------------------------------------------------------------------------


@pytest.fixture
def redis_spec(redis_server: str, request: pytest.FixtureRequest) -> str:  # noqa: F811
    return f"{redis_server}/0?namespace=shared{abs(hash(request.node.name)) % 10**8}"


def test_redis_an_edit_is_seen_at_once_and_a_copy_elsewhere_cannot_edit(
    tmp_path: Path, redis_spec: str, peer: _Peer
) -> None:
    """Two folders on one Redis namespace: no common lock file, so the docstore's generation keeps them apart."""
    folder, copy = tmp_path / "a", tmp_path / "b"
    _build(folder, redis_spec)
    shutil.copytree(folder, copy)  # its carag_docstore.json names the same Redis namespace
    writer = _load(folder)
    peer.ok("load", str(copy))
    writer.insert_nodes([_node(i, "new") for i in range(3)])
    changed = peer.ok("changed")
    assert "docstore was edited by another process" in changed  # at once, before any persist
    ids = peer.ok("ids")
    assert "new0" in ids["docstore"] and "new0" not in ids["vectors"]  # the text without its vector, as before
    refused = peer.ask("delete", ["e2"])
    assert refused["error"] == "IndexChangedError" and "generation" in refused["message"]
    assert "e2" in docstore_node_ids(writer.index.docstore)  # refused before anything was written
    peer.ok("load", str(copy))  # a reload embeds what the docstore holds that the copy lacks
    assert "new0" in peer.ok("ids")["vectors"] and peer.ok("changed") is None
    peer.ok("delete", ["e2"])  # the peer edits now: the writer's copy is the stale one
    with pytest.raises(IndexChangedError, match="generation"):
        writer.insert_nodes([_node(7, "late")])


def test_redis_a_reader_loading_mid_edit_does_not_undo_the_writer(tmp_path: Path, redis_spec: str, peer: _Peer) -> None:
    """Loading replays the journal into the process's own vectors only.  Before, the replay wrote the journal's
    nodes to Redis again: a node the writer had deleted since came back."""
    _build(tmp_path, redis_spec)
    writer = _load(tmp_path)
    writer.insert_nodes([_node(i, "new") for i in range(3)])
    writer.persist(tmp_path, persist_index=True)  # a journal segment that inserts new0..new2
    assert (tmp_path / "carag" / "carag_journal.json").is_file()
    writer.delete_nodes(["new0"])  # not persisted yet: the writer holds the folder
    writer.insert_nodes([_node(0, "late")])
    peer.ok("load", str(tmp_path))
    stored = docstore_node_ids(writer.index.docstore)
    assert "new0" not in stored and "late0" in stored  # the writer's delete stands
    ids = peer.ok("ids")
    assert ids["vectors"] == sorted(stored) == sorted(index_node_ids(writer.index))  # the reader is in line
    query = "late passage 0 about topic 0"
    assert peer.ok("retrieve", query) == _ids(writer, query)  # the writer's unpersisted insert, embedded again
    assert peer.ok("changed") is None


# -- DuckDB: one process ---------------------------------------------------------------------------------------


def test_duckdb_a_second_process_gets_a_clear_error(tmp_path: Path, peer: _Peer) -> None:
    pytest.importorskip("llama_index.storage.docstore.duckdb", reason="pip install 'llama-index-carag[duckdb]'")
    _build(tmp_path, "duckdb")
    held = _load(tmp_path)  # DuckDB's own lock: held while the store is open
    refused = peer.ask("load", str(tmp_path))
    assert refused["error"] == "IndexBusyError"
    assert "one process open it, readers included" in refused["message"] and "Redis" in refused["message"]
    assert len(index_node_ids(held.index)) == N


# -- a load during a full persist ------------------------------------------------------------------------------

_PAUSED_READER = """
import json, sys
from pathlib import Path
from tests.helpers import TableEmbedding
from llama_index_carag.retrieval import state
from llama_index_carag.retrieval.retriever import ContextAwareRetriever
from llama_index_carag.stores.vector_stores import index_node_ids

real = state.read_state

def paused(folder):  # the state's manifest and arrays are read: wait for the test before reading the index
    out = real(folder)
    print("PAUSED", flush=True)
    sys.stdin.readline()
    return out

state.read_state = paused
try:
    r = ContextAwareRetriever.from_persist_dir(Path(sys.argv[1]), embed_model=TableEmbedding({"probe": [1.0] * DIM}))
    print(json.dumps({"ok": sorted(index_node_ids(r.index))}), flush=True)
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
""".replace("DIM", str(DIM))

_LOCK_HOLDER = """
import sys
from llama_index_carag.core import writer_lock
with getattr(writer_lock, sys.argv[2])(sys.argv[1]):
    print("HELD", flush=True)
    sys.stdin.readline()
"""


def _child(script: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, f"the child exited ({child.poll()})"
    return line.strip()


def _go_on(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.write("\n")
    child.stdin.flush()


def _end(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.kill()
    child.wait(timeout=TIMEOUT_S)
    for stream in (child.stdin, child.stdout):
        if stream is not None:
            stream.close()


class _Seen(logging.Handler):
    """Sets ``event`` on the first record whose message holds ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.INFO)
        self.text, self.event = text, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


def test_a_load_during_a_full_persist_reads_one_persist_whole(tmp_path: Path) -> None:
    """Before: the writer switched the folder under a reader that had read the old state and not yet the index
    (new docstore and vectors, old state: the load failed), and deleted the old state's arrays."""
    _build(tmp_path)
    writer = _load(tmp_path)
    old_ids = sorted(index_node_ids(writer.index))
    old_arrays = {p.name for p in (tmp_path / "carag").glob("*.npy")}
    reader = _child(_PAUSED_READER, str(tmp_path))
    waiting = _Seen("the loads reading the folder")
    lock_logger = logging.getLogger("llama_index_carag.core.writer_lock")
    lock_logger.addHandler(waiting)
    level, lock_logger.level = lock_logger.level, logging.INFO
    persisted, errors = threading.Event(), []

    def persist() -> None:
        try:
            writer.persist(tmp_path, persist_index=True, compact=True)  # a full persist: the folder is switched
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)
        finally:
            persisted.set()

    try:
        assert _line(reader) == "PAUSED"  # it holds the old manifest and arrays, not yet the index's files
        writer.insert_nodes([_node(i, "new") for i in range(4)])
        writer.delete_nodes(["e1"])
        thread = threading.Thread(target=persist)
        thread.start()
        for _ in range(TIMEOUT_S * 20):  # the writer waits for the load (or, unguarded, switches under it)
            if waiting.event.wait(0.05) or persisted.is_set():
                break
        _go_on(reader)
        loaded = json.loads(_line(reader))
        thread.join(TIMEOUT_S)
    finally:
        lock_logger.removeHandler(waiting)
        lock_logger.setLevel(level)
        _end(reader)
    assert persisted.is_set() and not errors, errors
    assert loaded == {"ok": old_ids}  # the persist it started on, whole
    new_ids = sorted(index_node_ids(writer.index))
    assert "new3" in new_ids and "e1" not in new_ids
    assert sorted(index_node_ids(_load(tmp_path).index)) == new_ids  # switched once the load was done
    arrays = {p.name for p in (tmp_path / "carag").glob("*.npy")}
    assert old_arrays - arrays  # the old persist's arrays that the new one does not name: deleted at the switch
    writer.insert_nodes([_node(9, "late")])  # a second switch, no reader: at once, and the first one's files go
    writer.persist(tmp_path, persist_index=True, compact=True)
    assert arrays - {p.name for p in (tmp_path / "carag").glob("*.npy")}  # the first switch's arrays went
    assert "late9" in index_node_ids(_load(tmp_path).index)
    assert not list(tmp_path.glob(".carag-staging-*")) and not (tmp_path / ".carag-commit.json").exists()


def test_a_persist_waits_a_bounded_time_for_loads_then_leaves_the_folder_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _build(tmp_path)
    writer = _load(tmp_path)
    old_ids = sorted(index_node_ids(writer.index))
    writer.insert_nodes([_node(i, "new") for i in range(2)])
    monkeypatch.setattr(writer_lock, "SWITCH_WAIT_S", 0.2)
    holder = _child(_LOCK_HOLDER, str(tmp_path), "reading")  # a load that does not end
    try:
        assert _line(holder) == "HELD"
        with pytest.raises(IndexBusyError, match="was being loaded by other processes"):
            writer.persist(tmp_path, persist_index=True, compact=True)
        assert not list(tmp_path.glob(".carag-staging-*"))  # nothing staged stays
        monkeypatch.setattr(writer_lock, "SWITCH_WAIT_S", TIMEOUT_S)
        assert sorted(index_node_ids(_load(tmp_path).index)) == old_ids  # loads (in this process) still run
        _go_on(holder)
        holder.wait(timeout=TIMEOUT_S)
    finally:
        _end(holder)
    writer.persist(tmp_path, persist_index=True, compact=True)  # the edits were kept: persisted now
    assert {"new0", "new1"} <= set(index_node_ids(_load(tmp_path).index))


def test_a_load_waits_a_bounded_time_for_a_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _build(tmp_path)
    monkeypatch.setattr(writer_lock, "READ_WAIT_S", 0.2)
    monkeypatch.setattr(writer_lock, "SWITCH_WAIT_S", 0.2)  # a load waits behind a switch for both bounds
    holder = _child(_LOCK_HOLDER, str(tmp_path), "switching")  # a writer stuck mid-switch
    try:
        assert _line(holder) == "HELD"
        with pytest.raises(IndexBusyError, match="waiting to switch the folder .or switching it. for over 0.4 s"):
            _load(tmp_path)
        _go_on(holder)
        holder.wait(timeout=TIMEOUT_S)
    finally:
        _end(holder)
    assert len(index_node_ids(_load(tmp_path).index)) == N
