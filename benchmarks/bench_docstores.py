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


The vector store, the fitted context and the carag state are not part of this benchmark (see bench_edits.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--kinds", default="simple,duckdb", help="comma-separated: simple, duckdb, redis")
    parser.add_argument("--redis", default=None, help="redis://HOST:PORT[/DB] for the 'redis' kind")
    parser.add_argument("--json", default=None, help="write the rows here too")
    args = parser.parse_args()
    corpus, batch = _nodes(args.n, "e", 0), _nodes(args.batch, "new", 1)
    rows = []
    for kind in args.kinds.split(","):
        spec = {"simple": "simple", "duckdb": "duckdb", "redis": f"{args.redis}?namespace=bench"}[kind]
        if kind == "redis" and not args.redis:
            raise SystemExit("--kinds redis needs --redis URL")
        folder = Path(tempfile.mkdtemp(prefix=f"bench_docstore_{kind}_"))
        try:
            rows.append(run(kind, spec, corpus, batch, folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
