"""The docstore's part of an edit: insert 1,000 passages into a docstore of 100k, then persist it.

    nice -n 10 python benchmarks/bench_docstores.py --n 100000 --batch 1000 --json /tmp/docstores.json

For each docstore (LlamaIndex's ``SimpleDocumentStore``; DuckDB and Redis through
:func:`~llama_index_carag.stores.docstores.open_docstore`; Redis only with ``--redis URL``), the docstore is
filled with ``--n`` synthetic passages (about 300 characters, a few metadata keys; not timed), then:

* ``insert``: ``--batch`` new passages written the way ``ContextAwareRetriever.insert_nodes`` writes them:
  ``VectorStoreIndex`` makes one ``add_documents([node], allow_update=True)`` call per node, inside the package's
  ``docstore_batch`` block (DuckDB and Redis: one write for the batch);
* ``insert_per_node``: another ``--batch`` the same way without the block (one write per node: LlamaIndex's
  key-value docstores used directly);
* ``persist``: the docstore's ``persist`` into the index folder (what ``storage_context.persist`` does for it):
  ``SimpleDocumentStore`` rewrites ``docstore.json`` with every passage; a key-value store has written each node
  already and writes nothing;
* ``get``: reading the batch back by id (``get_nodes``);


With ``--e2e`` the same through the whole package instead, on the synthetic corpus of ``bench_scale.py`` (cached
under ``--cache``; vectors given): an index of ``--n`` passages in a ``SafeFaissMapVectorStore`` with the chosen
docstore, ``ContextAwareRetriever.from_index`` (the default preset), a full ``persist(..., persist_index=True)``,
``insert_nodes`` of 1,000 new passages and ``persist`` again, each with the time spent in the docstore, then
``from_persist_dir`` (with the check that docstore and vectors agree).

    nice -n 10 python benchmarks/bench_docstores.py --e2e --n 100000 --kinds simple,duckdb
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llama_index.core.schema import TextNode

from llama_index_carag.stores.docstores import clear_docstore, docstore_batch, open_docstore

logger = logging.getLogger(__name__)

WORDS = [
    "wind",
    "farm",
    "fish",
    "offshore",
    "turbine",
    "habitat",
    "noise",
    "survey",
    "species",
    "reef",
    "coast",
    "energy",
    "policy",
    "study",
]


def _nodes(n: int, prefix: str, seed: int) -> list[TextNode]:
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = rng.choice(WORDS, size=45)
        out.append(
            TextNode(
                id_=f"{prefix}{i}",
                text=" ".join(words.tolist()),
                metadata={"claim_id": f"c{i % 997}", "theme": f"t{i % 13}", "source": "synthetic"},
            )
        )
    return out


def run(kind: str, spec: str, corpus: list[TextNode], batch: list[TextNode], folder: Path) -> dict[str, Any]:
    """Fill one docstore with ``corpus``, then time the insert of ``batch``, a persist and a read of the batch."""
    store = open_docstore(spec, folder)
    if kind != "simple":
        clear_docstore(store)
    t0 = time.perf_counter()
    for start in range(0, len(corpus), 10_000):
        store.add_documents(corpus[start : start + 10_000], allow_update=True)
    fill_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with docstore_batch(store):
        for node in batch:
            store.add_documents([node], allow_update=True)
    insert_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    store.persist(persist_path=str(folder / "docstore.json"))
    persist_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = store.get_nodes([n.node_id for n in batch])
    get_s = time.perf_counter() - t0
    assert [n.node_id for n in got] == [n.node_id for n in batch]
    more = [n.model_copy(update={"id_": "more" + n.node_id}) for n in batch]
    t0 = time.perf_counter()
    for node in more:
        store.add_documents([node], allow_update=True)
    per_node_s = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    if kind == "redis":
        clear_docstore(store)
    return {
        "docstore": kind,
        "n": len(corpus),
        "batch": len(batch),
        "fill_s": round(fill_s, 2),
        "insert_s": round(insert_s, 3),
        "persist_s": round(persist_s, 3),
        "get_s": round(get_s, 3),
        "insert_per_node_s": round(per_node_s, 3),
        "folder_mb": round(size / 1e6, 1),
    }


def _timed(store: Any, name: str, spent: dict[str, float]) -> None:
    """Add the time of ``store.name(...)`` (an instance's method) to ``spent[name]``."""
    original: Callable[..., Any] = getattr(store, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0

    setattr(store, name, wrapper)


def e2e(kind: str, spec: str, cache: Path, n: int, out: Path) -> dict[str, Any]:
    """Insert 1,000 into an index of ``n`` through ``ContextAwareRetriever`` with one docstore, and persist."""
    sys.path.insert(0, os.path.dirname(__file__))
    import faiss
    from bench_scale import DIM, _claims, _lines, _new_nodes, _rows, prepare
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    from llama_index_carag import ContextAwareRetriever
    from llama_index_carag.settings import DEFAULT
    from llama_index_carag.stores.faiss_store import SafeFaissMapVectorStore
    from llama_index_carag.stores.index_store import DeferredIndexStore

    src = prepare(cache, n, 200)
    store = open_docstore(spec, out)
    if kind != "simple":
        clear_docstore(store)
    vectors = SafeFaissMapVectorStore(faiss_index=faiss.IndexIDMap2(faiss.IndexFlatIP(DIM)))
    storage = StorageContext.from_defaults(vector_store=vectors, index_store=DeferredIndexStore(), docstore=store)
    index = VectorStoreIndex(nodes=[], storage_context=storage, embed_model=MockEmbedding(embed_dim=DIM))
    texts = _lines(src / "texts.txt")[:n]
    t0 = time.perf_counter()
    for start in range(0, n, 10_000):
        stop = min(n, start + 10_000)
        rows = _rows(src / "vectors.npy", start, stop)
        nodes = [TextNode(id_=f"n{i}", text=texts[i], embedding=rows[i - start].tolist()) for i in range(start, stop)]
        with docstore_batch(store):
            index.insert_nodes(nodes)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    retriever = ContextAwareRetriever.from_index(index, DEFAULT, claim_nodes=_claims(src))
    fit_s = time.perf_counter() - t0
    spent: dict[str, float] = {}
    for name in ("add_documents", "flush", "persist"):
        if hasattr(store, name):
            _timed(store, name, spent)
    t0 = time.perf_counter()
    retriever.persist(out, persist_index=True)
    full_persist_s = time.perf_counter() - t0
    spent.clear()
    t0 = time.perf_counter()
    retriever.insert_nodes(_new_nodes(src, n))
    insert_s = time.perf_counter() - t0
    insert_docstore_s = spent.get("add_documents", 0.0) + spent.get("flush", 0.0)
    spent.clear()
    t0 = time.perf_counter()
    retriever.persist(out, persist_index=True)
    persist_s = time.perf_counter() - t0
    del retriever, index, storage, vectors, store
    t0 = time.perf_counter()
    reloaded = ContextAwareRetriever.from_persist_dir(out, embed_model=MockEmbedding(embed_dim=DIM))
    reload_s = time.perf_counter() - t0
    assert reloaded.reconcile_docstore() == (0, 0)
    store = reloaded.index.docstore
    row = {
        "docstore": kind,
        "n": n,
        "build_s": round(build_s, 1),
        "fit_s": round(fit_s, 1),
        "full_persist_s": round(full_persist_s, 2),
        "insert_1000_s": round(insert_s, 3),
        "insert_docstore_s": round(insert_docstore_s, 3),
        "persist_after_insert_s": round(persist_s, 2),
        "persist_docstore_s": round(spent.get("persist", 0.0), 3),
        "reload_s": round(reload_s, 2),
    }
    if kind == "redis":
        clear_docstore(store)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--kinds", default="simple,duckdb", help="comma-separated: simple, duckdb, redis")
    parser.add_argument("--redis", default=None, help="redis://HOST:PORT[/DB] for the 'redis' kind")
    parser.add_argument("--json", default=None, help="write the rows here too")
    parser.add_argument("--e2e", action="store_true", help="through ContextAwareRetriever (see the module)")
    parser.add_argument("--cache", default="/tmp/carag_scale", help="bench_scale.py's corpus cache (--e2e)")
    args = parser.parse_args()
    corpus, batch = ([], []) if args.e2e else (_nodes(args.n, "e", 0), _nodes(args.batch, "new", 1))
    rows = []
    for kind in args.kinds.split(","):
        spec = {"simple": "simple", "duckdb": "duckdb", "redis": f"{args.redis}?namespace=bench"}[kind]
        if kind == "redis" and not args.redis:
            raise SystemExit("--kinds redis needs --redis URL")
        folder = Path(tempfile.mkdtemp(prefix=f"bench_docstore_{kind}_"))
        try:
            if args.e2e:
                rows.append(e2e(kind, spec, Path(args.cache), args.n, folder))
            else:
                rows.append(run(kind, spec, corpus, batch, folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
