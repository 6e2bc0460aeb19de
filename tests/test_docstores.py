"""Docstores from the ecosystem: DuckDB (embedded) and Redis (a server on loopback, started here).

Round trips in a fresh process, an insert that writes O(batch) to the docstore, and a process killed with
SIGKILL in the middle of an insert: reloading gives an index whose vector side, docstore and fitted context
agree, with every insert that returned before the kill and no half-written node.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import TextNode

from llama_index_carag.retrieval.indexing import build_faiss_index
from llama_index_carag.retrieval.retriever import ContextAwareRetriever
from llama_index_carag.stores.docstores import (
    SPEC_NAME,
    docstore_kind,
    docstore_node_ids,
    open_docstore,
    read_spec,
)
from llama_index_carag.stores.vector_stores import index_node_ids
from tests.helpers import TableEmbedding

ROOT = Path(__file__).resolve().parents[1]
DIM = 16
N = 80
QUERIES = ["topic 1 passage", "topic 3 number", "something else entirely"]
CHILD_TIMEOUT_S = 180


def _embed() -> TableEmbedding:
    return TableEmbedding({"probe": [1.0] + [0.0] * (DIM - 1)})


def _node(i: int, prefix: str = "e") -> TextNode:
    return TextNode(id_=f"{prefix}{i}", text=f"passage number {i} about topic {i % 5}", metadata={"n": i})


def _results(retriever: ContextAwareRetriever) -> list[list[list[Any]]]:
    return [[[n.node.node_id, round(float(n.score or 0.0), 5)] for n in retriever.retrieve(q)] for q in QUERIES]


# -- the Redis server ---------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``redis-server`` on 127.0.0.1 and a free port, its files in a temp folder; its base URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (Debian package redis-server; .ci/run installs it)")
    pytest.importorskip("llama_index.storage.docstore.redis", reason="pip install 'llama-index-carag[redis]'")
    import redis

    folder = tmp_path_factory.mktemp("redis")
    for _attempt in range(3):
        port = _free_port()
        args = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(folder), "--save", ""]
        args += ["--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no"]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        if proc.poll() is None:
            break
    else:  # pragma: no cover - three ports taken in a row
        pytest.fail("redis-server did not start")
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait()


_namespaces = iter(range(10_000))


@pytest.fixture(params=["duckdb", "redis"])
def store_spec(request: pytest.FixtureRequest) -> str:
    """The docstore spec of a test: ``"duckdb"`` (in the index folder) or a fresh Redis namespace."""
    if request.param == "duckdb":
        pytest.importorskip("llama_index.storage.docstore.duckdb", reason="pip install 'llama-index-carag[duckdb]'")
        return "duckdb"
    url = request.getfixturevalue("redis_server")
    return f"{url}/0?namespace=test{next(_namespaces)}"


def _build(folder: Path, spec: str, n: int = N) -> ContextAwareRetriever:
    store = open_docstore(spec, folder)
    index = build_faiss_index([_node(i) for i in range(n)], _embed(), id_map=True, docstore=store)
    retriever = ContextAwareRetriever.from_index(index, n_clusters=3, similarity_top_k=5, random_state=0)
    retriever.persist(folder, persist_index=True)
    return retriever


def _child(script: str, folder: Path, *args: str, **popen: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    prelude = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        from tests.helpers import TableEmbedding
        from llama_index_carag.retrieval.retriever import ContextAwareRetriever
        folder = Path(sys.argv[1])
        embed = TableEmbedding({{"probe": [1.0] + [0.0] * {DIM - 1}}})
        """
    )
    code = prelude + textwrap.dedent(script)
    return subprocess.Popen([sys.executable, "-c", code, str(folder), *args], env=env, cwd=ROOT, text=True, **popen)


def _reloaded(folder: Path) -> tuple[list[str], list[list[list[Any]]]]:
    """The docstore's ids and the results of :data:`QUERIES` after ``from_persist_dir`` in a fresh process."""
    child = _child(
        f"""
        retriever = ContextAwareRetriever.from_persist_dir(folder, embed_model=embed)
        queries = {QUERIES!r}
        ids = sorted(retriever.index.docstore.docs)
        print(json.dumps([ids, [[[n.node.node_id, round(float(n.score or 0.0), 5)] for n in retriever.retrieve(q)]
                                for q in queries]]))
        """,
        folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = child.communicate(timeout=CHILD_TIMEOUT_S)
    assert child.returncode == 0, err[-3000:]
    assert "differ" not in err  # nothing for the crash reconciliation to do
    ids, results = json.loads(out.strip().splitlines()[-1])
    return ids, results


# -- round trip ---------------------------------------------------------------------------------------------


def test_open_docstore_specs(tmp_path: Path) -> None:
    assert docstore_kind(open_docstore(None)) == "simple"
    with pytest.raises(ValueError, match="persist_dir"):
        open_docstore("duckdb")
    with pytest.raises(ValueError, match="Unknown docstore"):
        open_docstore("postgres://x")


def test_round_trip_in_a_fresh_process(tmp_path: Path, store_spec: str) -> None:
    retriever = _build(tmp_path, store_spec)
    expected = _results(retriever)
    spec = read_spec(tmp_path)
    assert spec is not None and spec["kind"] == ("duckdb" if store_spec == "duckdb" else "redis")
    assert not (tmp_path / "docstore.json").exists()  # the nodes are in the store, not in a JSON file
    if spec["kind"] == "duckdb":
        assert spec["path"] == "docstore.duckdb"  # relative: the folder can move
        del retriever  # DuckDB: one process opens the file at a time
        import gc

        gc.collect()
    ids, results = _reloaded(tmp_path)
    assert results == expected and len(ids) == N


def test_a_journaled_persist_reloads_on_the_docstore(tmp_path: Path, store_spec: str) -> None:
    """Edits after the base persist go to a journal segment; a fresh process replays it on the DuckDB/Redis
    docstore (whose nodes are already there) and retrieves what the edited retriever does."""
    retriever = _build(tmp_path, store_spec)
    retriever.insert_nodes([_node(i, prefix="new") for i in range(6)])
    retriever.delete_nodes(["e1", "e2", "e3"])
    retriever.persist(tmp_path, persist_index=True)
    journal = json.loads((tmp_path / "carag" / "carag_journal.json").read_text())
    assert len(journal["segments"]) == 1  # the edits went to one segment, not a full persist
    expected = _results(retriever)
    del retriever  # DuckDB: one process opens the file at a time
    import gc

    gc.collect()
    ids, results = _reloaded(tmp_path)
    assert results == expected
    assert "new5" in ids and "e1" not in ids and len(ids) == N + 6 - 3


# -- O(batch) writes ----------------------------------------------------------------------------------------


def test_insert_writes_the_batch_only(tmp_path: Path, store_spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An insert of 10 into 80 writes 10 nodes (and their hashes) to the docstore; persist writes none."""
    retriever = _build(tmp_path, store_spec)
    store = retriever.index.docstore
    writes: list[int] = []
    if store_spec == "duckdb":
        from llama_index.storage.kvstore.duckdb import DuckDBKVStore

        put_all = DuckDBKVStore.put_all

        def counting(self: Any, kv_pairs: list[Any], *args: Any, **kwargs: Any) -> None:
            writes.append(len(kv_pairs))
            put_all(self, kv_pairs, *args, **kwargs)

        monkeypatch.setattr(DuckDBKVStore, "put_all", counting)

        def written() -> int:
            return sum(writes)
    else:
        import redis

        client = redis.Redis.from_url(store_spec.partition("?")[0])

        def written() -> int:  # the server's own count of HSET calls
            stats = client.info("commandstats")
            return int(stats.get("cmdstat_hset", {}).get("calls", 0))

    before = written()
    retriever.insert_nodes([_node(i, "new") for i in range(10)])
    after_insert = written()
    assert after_insert - before == 20  # 10 nodes + 10 hashes, not the 90 of the corpus
    if store_spec == "duckdb":
        assert [w for w in writes if w] == [10, 10]  # one statement per collection: the package batches them
    retriever.persist(tmp_path, persist_index=True)
    assert written() == after_insert  # persist does not rewrite the docstore
    assert docstore_node_ids(store) == set(index_node_ids(retriever.index))
    retriever.delete_nodes(["new0", "e1"])
    assert len(docstore_node_ids(store)) == N + 8


def test_batching_store_writes_once_and_reads_what_is_pending() -> None:
    from llama_index.core.storage.docstore.simple_docstore import SimpleDocumentStore

    from llama_index_carag.stores.docstores import BatchingDocumentStore, docstore_batch

    inner = SimpleDocumentStore()
    calls: list[int] = []
    add = inner.add_documents

    def counting(docs: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(len(docs))
        add(docs, *args, **kwargs)

    inner.add_documents = counting  # type: ignore[method-assign]
    store = BatchingDocumentStore(inner)
    with docstore_batch(store):
        for i in range(5):
            store.add_documents([_node(i)], allow_update=True)
        assert calls == []
        with store.batch():  # nested: written when the outermost block ends
            store.add_documents([_node(5)])
        assert calls == []
        assert store.get_node("e2").get_content() == _node(2).get_content()  # a read writes what is pending
        assert calls == [6]
        store.add_documents([_node(6)])
    assert calls == [6, 1]
    store.add_documents([_node(7)])  # outside a batch: straight through
    assert calls == [6, 1, 1] and set(store.docs) == {f"e{i}" for i in range(8)}
    store.delete_document("e7")
    assert not store.document_exists("e7") and docstore_batch(inner) is not None


# -- a kill in the middle of an insert ----------------------------------------------------------------------

_KILL_SCRIPT = """
from llama_index.core.schema import TextNode
retriever = ContextAwareRetriever.from_persist_dir(folder, embed_model=embed)
inner = retriever.index.docstore.inner  # the DuckDB/Redis store under the package's batching wrapper
add = inner.add_documents
state = {"batch": -1}

def add_documents(nodes, *args, **kwargs):  # one call per insert; in batch 4, die after half the nodes
    if state["batch"] == 4:
        add(nodes[:5], *args, **kwargs)
        print("MID", flush=True)
        import time
        time.sleep(600)
    add(nodes, *args, **kwargs)

inner.add_documents = add_documents
for batch in range(6):
    state["batch"] = batch
    nodes = [TextNode(id_=f"b{batch}_{i}", text=f"inserted batch {batch} item {i} topic {i % 5}") for i in range(10)]
    retriever.insert_nodes(nodes)
    print("DONE", batch, flush=True)
    if batch == 1:
        retriever.persist(folder, persist_index=True)
        print("PERSISTED", flush=True)
    if batch == 3:
        retriever.delete_nodes([f"e{i}" for i in range(5)])
        print("DELETED", flush=True)
"""


def test_kill_mid_insert_loses_nothing(tmp_path: Path, store_spec: str) -> None:
    retriever = _build(tmp_path, store_spec)
    if store_spec == "duckdb":
        del retriever
        import gc

        gc.collect()
    child = _child(_KILL_SCRIPT, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen: list[str] = []
    assert child.stdout is not None
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            seen.append(line.strip())
            if line.startswith("MID"):
                child.send_signal(signal.SIGKILL)
                break
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
        stderr = child.stderr.read() if child.stderr else ""
    assert seen[-1:] == ["MID"], (seen, stderr[-3000:])
    assert child.returncode == -signal.SIGKILL
    assert "PERSISTED" in seen and "DELETED" in seen and "DONE 3" in seen and "DONE 4" not in seen

    reloaded = ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=_embed())
    index, store = reloaded.index, reloaded.index.docstore
    vector_ids, stored_ids = set(index_node_ids(index)), docstore_node_ids(store)
    assert vector_ids == stored_ids  # both sides agree
    context_ids = {i for i, _ in reloaded.context.iter_items()}
    assert context_ids == vector_ids  # and the fitted context knows the same passages
    committed = {f"b{b}_{i}" for b in range(4) for i in range(10)} | {f"e{i}" for i in range(5, N)}
    assert committed <= vector_ids  # every insert that returned is there, the ones after persist too
    assert not {f"e{i}" for i in range(5)} & vector_ids  # the delete that returned stays done
    partial = sorted(i for i in vector_ids if i.startswith("b4_"))
    assert len(partial) == 5  # the nodes of the killed batch written before the kill: whole, and indexed
    for node in store.get_nodes(sorted(vector_ids - {f"e{i}" for i in range(N)})):
        batch, item = node.node_id[1:].split("_")
        assert node.get_content() == f"inserted batch {batch} item {item} topic {int(item) % 5}"  # no torn node
    hits = reloaded.retrieve("inserted batch 2 item 3 topic 3")
    assert hits and all(h.node.node_id in vector_ids for h in hits)
    assert hits[0].node.node_id == "b2_3"  # re-embedded on reload: found again

    reloaded.persist(tmp_path, persist_index=True)  # the reconciled index saves and loads cleanly
    if store_spec == "duckdb":
        del reloaded, store, index
        import gc

        gc.collect()
    again = ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=_embed())
    assert again.reconcile_docstore() == (0, 0)
    assert set(index_node_ids(again.index)) == vector_ids
    assert (tmp_path / SPEC_NAME).is_file()


# -- the CLI ------------------------------------------------------------------------------------------------


def test_cli_index_with_a_duckdb_docstore(tmp_path: Path) -> None:
    """``carag index --docstore duckdb`` keeps the passages in ``docstore.duckdb``; ``carag check`` reads them."""
    pytest.importorskip("llama_index.storage.docstore.duckdb")
    from llama_index_carag.datasets import demo_corpus_path
    from tests.helpers import run_cli

    out = tmp_path / "index"
    args = ["index", str(demo_corpus_path()), "--out", str(out), "--clusters", "3", "--docstore", "duckdb"]
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    assert (out / "docstore.duckdb").is_file() and not (out / "docstore.json").exists()
    assert read_spec(out) == {"kind": "duckdb", "namespace": "carag", "path": "docstore.duckdb"}
    checked = run_cli("check", "Offshore wind farms drive fish away.", "--index", str(out), "--no-llm", "--json")
    assert checked.returncode == 0, checked.stderr
    evidence = json.loads(checked.stdout)["evidence"]
    assert evidence and all(e["text"] for e in evidence)
    bad = run_cli("index", str(demo_corpus_path()), "--out", str(tmp_path / "x"), "--docstore", "mongo://h")
    assert bad.returncode == 2 and "Unknown docstore" in bad.stderr


def test_a_simple_docstore_leaves_no_spec(tmp_path: Path) -> None:
    """Persisting with LlamaIndex's simple docstore removes a spec an earlier DuckDB build left."""
    pytest.importorskip("llama_index.storage.docstore.duckdb")
    retriever = _build(tmp_path, "duckdb", n=30)
    assert read_spec(tmp_path) is not None
    simple = build_faiss_index([_node(i) for i in range(30)], _embed(), id_map=True)
    ContextAwareRetriever.from_index(simple, n_clusters=3, random_state=0).persist(tmp_path, persist_index=True)
    assert read_spec(tmp_path) is None and (tmp_path / "docstore.json").is_file()
    del retriever
