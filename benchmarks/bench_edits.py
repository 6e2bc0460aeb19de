"""Corpus edits at scale: insert / delete 1,000 passages and persist after them, against a full fit and persist.

    nice -n 10 python benchmarks/bench_edits.py --n 100000 --json /tmp/edits_100k.json
    nice -n 10 python benchmarks/bench_edits.py --n 300000 --json /tmp/edits_300k.json --profile

The synthetic corpus of :mod:`bench_scale` (same generator, same cache under ``--cache``), indexed in a
``SafeFaissMapVectorStore`` (a store that can delete) with the text in LlamaIndex's docstore and, as the
package's own ``build_faiss_index`` does, a ``DeferredIndexStore`` as the index store.  One run:

* the full fit of ``ContextAwareRetriever.from_index(index, DEFAULT)`` (claim and query vectors given);
* a full ``persist(dir, persist_index=True)`` (index + state) into an empty folder: the base;
* ``insert_nodes`` of 1,000 new passages, then ``persist`` again into the same folder (a journal segment);
* ``insert_nodes`` of 1,000 more (``insert_again``: growth the first insert amortised), deleted again, and
  ``persist`` (``persist_after_churn``: a segment of 2,000 nodes);
* ``delete_nodes`` of 1,000 passages (drawn with a fixed seed), then ``persist`` again (a segment);
* ``from_persist_dir`` of that folder (the base, then the three segments replayed), its top-k compared with the
  edited retriever's; ``persist(..., compact=True)`` (a full persist of the edited retriever) and its reload
  (``--no-reload``, and :mod:`bench_scale`'s worker: neither the compact persist nor the reloads).

Each edit and persist is split into steps by timers put around the functions it calls (vector store,
docstore, index struct, context items, each fitted table, the state's parts, the journal); ``--profile``
also prints cProfile's top functions of each edit.  Targets (issue 37): insert / delete 1,000 ≤ 2% of the
full fit, persist after an edit ≤ 2% of the full persist.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np
from bench_scale import DIM, N_EDIT, _claims, _lines, _new_nodes, _queries, _rows, prepare

STEPS: dict[str, float] = defaultdict(float)


def _timed(owner: Any, name: str, label: str) -> None:
    """Wrap ``owner.name`` (a class's method or a module's function) so that its time adds to ``STEPS[label]``."""
    original = getattr(owner, name)
    if getattr(original, "_bench_timed", False):
        return
    is_static = isinstance(owner, type) and isinstance(owner.__dict__.get(name), staticmethod)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            STEPS[label] += time.perf_counter() - t0

    wrapper._bench_timed = True  # type: ignore[attr-defined]
    setattr(owner, name, staticmethod(wrapper) if is_static else wrapper)


def install_timers(retriever: Any) -> None:
    """Timers around what an edit and a persist call (nested timers overlap: read each step on its own)."""
    from llama_index.core.indices.vector_store.base import VectorStoreIndex
    from llama_index.core.storage.index_store.simple_index_store import SimpleIndexStore

    from llama_index_carag.core import context as context_mod
    from llama_index_carag.core import persistence
    from llama_index_carag.retrieval import journal, state, updates

    index = retriever._index
    storage = index.storage_context
    _timed(type(index.vector_store), "add", "vector store add")
    _timed(type(index.vector_store), "delete_nodes", "vector store delete")
    _timed(type(index.vector_store), "persist", "persist: vector store")
    _timed(type(storage.docstore), "add_documents", "docstore add")
    _timed(type(storage.docstore), "delete_document", "docstore delete")
    _timed(type(storage.docstore), "persist", "persist: docstore")
    _timed(type(storage.index_store), "add_index_struct", "index struct (index store)")
    _timed(type(storage.index_store), "flush", "index struct write (DeferredIndexStore.flush)")
    _timed(SimpleIndexStore, "add_index_struct", "index struct serialise (SimpleIndexStore)")
    _timed(type(storage.index_store), "persist", "persist: index store")
    _timed(VectorStoreIndex, "_delete_from_index_struct", "index struct delete")
    _timed(updates, "_evidence_items", "context: read new vectors + metadata")
    _timed(context_mod.ThematicContext, "add_items", "context: add items (clusters, SOIs)")
    _timed(context_mod.ThematicContext, "remove_items", "context: remove items")
    for key, table in retriever._corpus.tables.items():
        _timed(type(table), "update", f"table update: {key}")
    _timed(state, "get_state", "persist: state to arrays (get_state)")
    _timed(state, "write_state", "persist: state write (write_state)")
    _timed(persistence, "ids_checksum", "persist: ids checksum")
    _timed(journal.EditJournal, "record_insert", "journal: keep the inserted nodes and vectors")
    _timed(journal.EditJournal, "persist_edits", "persist: journal (checks + segment)")
    _timed(journal, "_segment_files", "persist: journal segment to bytes")
    _timed(journal, "append_journal_segment", "persist: journal segment write + commit")


@contextmanager
def measure(out: dict[str, Any], key: str, profile: bool) -> Iterator[None]:
    STEPS.clear()
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    if prof is not None:
        prof.enable()
    try:
        yield
    finally:
        if prof is not None:
            prof.disable()
        total = time.perf_counter() - t0
        out[key] = {"total_s": total, "steps_s": dict(STEPS)}
        if prof is not None:
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(35)
            out[key]["profile"] = buf.getvalue()


def map_index(folder: Path, n: int):
    """The first ``n`` passages in a ``SafeFaissMapVectorStore`` (FAISS ``IndexIDMap2`` over flat IP) + docstore,
    with the package's ``DeferredIndexStore`` (what ``build_faiss_index`` gives)."""
    import faiss
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import TextNode

    from llama_index_carag.stores.faiss_store import SafeFaissMapVectorStore
    from llama_index_carag.stores.index_store import DeferredIndexStore

    store = SafeFaissMapVectorStore(faiss_index=faiss.IndexIDMap2(faiss.IndexFlatIP(DIM)))
    storage = StorageContext.from_defaults(vector_store=store, index_store=DeferredIndexStore())
    index = VectorStoreIndex(nodes=[], storage_context=storage, embed_model=MockEmbedding(embed_dim=DIM))
    texts = _lines(folder / "texts.txt")[:n]
    for start in range(0, n, 50_000):
        stop = min(n, start + 50_000)
        vectors = _rows(folder / "vectors.npy", start, stop)
        ids = np.arange(start, stop, dtype=np.int64)
        store.client.add_with_ids(vectors, ids)
        for i in range(start, stop):
            store._node_id_to_faiss_id_map[f"n{i}"] = i
            store._faiss_id_to_node_id_map[i] = f"n{i}"
            index.index_struct.nodes_dict[f"n{i}"] = f"n{i}"
        nodes = [TextNode(id_=f"n{i}", text=texts[i]) for i in range(start, stop)]
        storage.docstore.add_documents(nodes, allow_update=False)
    storage.index_store.add_index_struct(index.index_struct)
    return index


def top_k_ids(retriever: Any, queries: list) -> list[list[str]]:
    return [[r.node.node_id for r in retriever.retrieve(q)] for q in queries]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from llama_index.core.embeddings import MockEmbedding

    from llama_index_carag import ContextAwareRetriever
    from llama_index_carag.settings import DEFAULT

    folder = prepare(Path(args.cache), args.n, 200)
    out_dir = Path(tempfile.mkdtemp(prefix="carag_edits_")) / "persisted"  # own folder: runs side by side
    res: dict[str, Any] = {"n": args.n, "n_edit": N_EDIT, "cpus": os.cpu_count()}
    t0 = time.perf_counter()
    index = map_index(folder, args.n)
    res["index_build_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    retriever = ContextAwareRetriever.from_index(index, DEFAULT, claim_nodes=_claims(folder))
    res["full_fit_s"] = time.perf_counter() - t0
    print(f"  fitted in {res['full_fit_s']:.1f} s", file=sys.stderr, flush=True)
    queries = _queries(folder)[:20]
    top_k_ids(retriever, queries[:2])  # warm
    install_timers(retriever)
    with measure(res, "full_persist", False):
        retriever.persist(out_dir, persist_index=True)
    new = _new_nodes(folder, args.n)
    with measure(res, "insert", args.profile):
        retriever.insert_nodes(new)
    with measure(res, "persist_after_insert", False):
        retriever.persist(out_dir, persist_index=True)
    again = [x.model_copy(update={"id_": f"again{i}"}) for i, x in enumerate(new)]
    with measure(res, "insert_again", False):  # a second batch: growth amortised by the first one
        retriever.insert_nodes(again)
    retriever.delete_nodes([x.node_id for x in again])
    with measure(res, "persist_after_churn", False):
        retriever.persist(out_dir, persist_index=True)
    gone = [f"n{i}" for i in np.random.default_rng(3).choice(args.n, N_EDIT, replace=False)]
    with measure(res, "delete", args.profile):
        retriever.delete_nodes(gone)
    with measure(res, "persist_after_delete", False):
        retriever.persist(out_dir, persist_index=True)
    journal_file = out_dir / "carag" / "carag_journal.json"
    res["journal_segments"] = len(json.loads(journal_file.read_text())["segments"]) if journal_file.is_file() else 0
    res["top_k_after_edits"] = top_k_ids(retriever, queries)
    embed = MockEmbedding(embed_dim=DIM)
    reload = getattr(args, "reload", False)  # bench_scale's worker passes its own args: no reloads there
    if reload:
        t0 = time.perf_counter()
        reloaded = ContextAwareRetriever.from_persist_dir(out_dir, embed_model=embed)
        res["load_with_journal_s"] = time.perf_counter() - t0
        res["journal_reload_same_top_k"] = top_k_ids(reloaded, queries) == res["top_k_after_edits"]
        del reloaded
    if reload:
        with measure(res, "compact_persist", False):  # a full persist of the edited retriever
            retriever.persist(out_dir, persist_index=True, compact=True)
        t0 = time.perf_counter()
        reloaded = ContextAwareRetriever.from_persist_dir(out_dir, embed_model=embed)
        res["load_full_s"] = time.perf_counter() - t0
        res["full_reload_same_top_k"] = top_k_ids(reloaded, queries) == res["top_k_after_edits"]
    res["insert_pct_of_fit"] = 100 * res["insert"]["total_s"] / res["full_fit_s"]
    res["insert_again_pct_of_fit"] = 100 * res["insert_again"]["total_s"] / res["full_fit_s"]
    res["delete_pct_of_fit"] = 100 * res["delete"]["total_s"] / res["full_fit_s"]
    full_persist = res["full_persist"]["total_s"]
    for key in ("persist_after_insert", "persist_after_churn", "persist_after_delete", "compact_persist"):
        if key in res:
            res[f"{key}_pct"] = 100 * res[key]["total_s"] / full_persist
    shutil.rmtree(out_dir.parent, ignore_errors=True)
    return res


def report(res: dict[str, Any], show: Callable[[str], None] = print) -> None:
    fit = res["full_fit_s"]
    show(f"\nedits benchmark: {res['n']:,} passages, {res['n_edit']:,} per edit; {res['cpus']} CPUs")
    show(f"full fit {fit:.2f} s; full persist (index + state) {res['full_persist']['total_s']:.2f} s\n")
    show("| operation | s | % of reference | target |\n|---|---:|---:|---:|")
    show(f"| insert_nodes 1,000 | {res['insert']['total_s']:.3f} | {res['insert_pct_of_fit']:.2f} % of fit | ≤ 2 % |")
    show(
        f"| insert_nodes 1,000 again | {res['insert_again']['total_s']:.3f} | "
        f"{res['insert_again_pct_of_fit']:.2f} % of fit | ≤ 2 % |"
    )
    show(f"| delete_nodes 1,000 | {res['delete']['total_s']:.3f} | {res['delete_pct_of_fit']:.2f} % of fit | ≤ 2 % |")
    for key, label, target in (
        ("persist_after_insert", "persist after insert 1,000 (journal)", "≤ 2 %"),
        ("persist_after_churn", "persist after insert + delete of 1,000 more (journal)", ""),
        ("persist_after_delete", "persist after delete 1,000 (journal)", "≤ 2 %"),
        ("compact_persist", "persist compact=True (full, edited)", ""),
    ):
        if key in res:
            show(f"| {label} | {res[key]['total_s']:.3f} | {res[f'{key}_pct']:.2f} % of full persist | {target} |")
    if "load_with_journal_s" in res:
        show(
            f"\nreload: {res['load_with_journal_s']:.2f} s with {res['journal_segments']} journal segments replayed "
            f"(same top-k as the edited retriever: {res['journal_reload_same_top_k']}); "
            f"{res['load_full_s']:.2f} s after compact (same top-k: {res['full_reload_same_top_k']})"
        )
    for key in ("insert", "insert_again", "delete", "full_persist", "persist_after_insert", "persist_after_delete"):
        steps = res[key]["steps_s"]
        show(f"\n{key} ({res[key]['total_s']:.3f} s), steps (nested timers overlap):")
        show("| step | s | % of the operation |\n|---|---:|---:|")
        for name, s in sorted(steps.items(), key=lambda kv: -kv[1]):
            show(f"| {name} | {s:.3f} | {100 * s / max(res[key]['total_s'], 1e-12):.0f} % |")
    for key in ("insert", "delete"):
        if "profile" in res[key]:
            show(f"\ncProfile of {key}:\n{res[key]['profile']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--cache", default="/tmp/carag_scale")
    p.add_argument("--json", help="write the results as JSON here")
    p.add_argument("--profile", action="store_true", help="also cProfile the insert and the delete")
    p.add_argument(
        "--no-reload", dest="reload", action="store_false", help="skip the two reloads (a second retriever in memory)"
    )
    args = p.parse_args()
    res = run(args)
    report(res)
    if args.json:
        slim = {
            k: ({kk: vv for kk, vv in v.items() if kk != "profile"} if isinstance(v, dict) else v)
            for k, v in res.items()
        }
        Path(args.json).write_text(json.dumps(slim, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
