"""The persist journal: a persist after an edit writes the edit, a reload replays it, and a failure at any
point leaves the previous state loadable."""

from __future__ import annotations

import json

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.core import persistence
from llama_index_carag.core.persistence import StateError
from llama_index_carag.retrieval import journal as journal_mod
from llama_index_carag.retrieval import state
from llama_index_carag.stores.vector_stores import get_node_embeddings
from tests.helpers import faiss_index, planted_corpus, simple_index, unit

HYBRID = dict(
    n_clusters=3, alpha=0.8, rerank_candidates=10, lexical_weight=0.6, claim_contrast=0.3, hub_penalty=0.1, hub_k=3
)
INDEX_FILES = ("docstore.json", "index_store.json", "default__vector_store.json")


@pytest.fixture
def corpus(rng):
    return planted_corpus(rng, evidence_per_claim=8)  # 96 passages: 25 % is 24 journaled nodes


def _fitted(corpus):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb, id_map=True)
    return ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, **HYBRID)


def _new_nodes(rng, evidence, n, prefix="new"):
    out = []
    for k in range(n):
        near = np.asarray(evidence[(7 * k) % len(evidence)].embedding)
        vec = unit(near + 0.2 * rng.normal(size=near.shape[0]))
        meta = dict(evidence[(7 * k) % len(evidence)].metadata)
        meta["evidence_id"] = f"{prefix}{k}"
        out.append(
            TextNode(
                id_=f"{prefix}{k}", text=f"{prefix} passage {k} quokka{k} zebra", metadata=meta, embedding=vec.tolist()
            )
        )
    return out


def _snapshot(r: ContextAwareRetriever) -> dict:
    """Everything a persist saves: the state's info and arrays, and the index (docstore, vectors, index struct)."""
    info, arrays = state.get_state(r.corpus, r.settings, r.embed_model)
    index = r.index
    ids, matrix = get_node_embeddings(index)
    store = index.vector_store
    return {
        "info": json.loads(json.dumps(info)),
        "arrays": {k: v.tolist() for k, v in arrays.items()},
        "vectors": dict(zip(ids, matrix.tolist())),
        "faiss_ids": dict(store.faiss_ids()) if hasattr(store, "faiss_ids") else None,
        "docs": {k: v.model_dump() for k, v in index.docstore.docs.items()},
        "nodes_dict": dict(index.index_struct.nodes_dict),
    }


def _top_k(r, claims):
    return [[(h.node.node_id, round(h.score, 6)) for h in r.retrieve(c.text)] for c in claims]


def _assert_same(a: ContextAwareRetriever, b: ContextAwareRetriever, claims) -> None:
    sa, sb = _snapshot(a), _snapshot(b)
    for key in sa:
        assert sa[key] == sb[key], key
    assert _top_k(a, claims) == _top_k(b, claims)


def _edit(kind, r, rng, evidence):
    if kind in ("insert", "both"):
        r.insert_nodes(_new_nodes(rng, evidence, 6))
    if kind in ("delete", "both"):
        r.delete_nodes([evidence[3].node_id, evidence[40].node_id, evidence[77].node_id])
    if kind == "both":
        replaced = evidence[10]
        r.insert_nodes([TextNode(id_=replaced.node_id, text="replaced wombat text", embedding=replaced.embedding)])
        r.delete_nodes(["new2"])  # a node inserted since the base


@pytest.mark.parametrize("kind", ["insert", "delete", "both"])
def test_journal_reload_is_a_full_persist_reload(corpus, rng, tmp_path, kind):
    evidence, claims, emb = corpus
    r = _fitted(corpus)
    base, full = tmp_path / "journaled", tmp_path / "full"
    r.persist(base, persist_index=True)
    stamps = {name: (base / name).stat().st_mtime_ns for name in INDEX_FILES}
    manifest = (base / "carag" / persistence.MANIFEST_NAME).read_bytes()
    _edit(kind, r, rng, evidence)
    r.persist(base, persist_index=True)
    # only the journal was written: LlamaIndex's files and the state's manifest are the base's
    assert {name: (base / name).stat().st_mtime_ns for name in INDEX_FILES} == stamps
    assert (base / "carag" / persistence.MANIFEST_NAME).read_bytes() == manifest
    assert (base / "carag" / persistence.JOURNAL_NAME).is_file()
    r.persist(full, persist_index=True)
    assert not (full / "carag" / persistence.JOURNAL_NAME).exists()
    from_journal = ContextAwareRetriever.from_persist_dir(base, embed_model=emb)
    from_full = ContextAwareRetriever.from_persist_dir(full, embed_model=emb)
    _assert_same(from_journal, from_full, claims)
    _assert_same(from_journal, r, claims)


def test_segments_accumulate_and_a_reloaded_retriever_journals_on(corpus, rng, tmp_path):
    evidence, claims, emb = corpus
    r = _fitted(corpus)
    r.persist(tmp_path, persist_index=True)
    r.insert_nodes(_new_nodes(rng, evidence, 4, "a"))
    r.persist(tmp_path, persist_index=True)
    r.delete_nodes(["a1", evidence[5].node_id])
    r.persist(tmp_path, persist_index=True)
    r.persist(tmp_path, persist_index=True)  # nothing changed: nothing written
    journal = json.loads((tmp_path / "carag" / persistence.JOURNAL_NAME).read_text())
    assert [s["meta"]["n_nodes"] for s in journal["segments"]] == [4, 2]
    back = ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb)
    _assert_same(back, r, claims)
    back.insert_nodes(_new_nodes(rng, evidence, 3, "b"))  # the reloaded retriever extends the same journal
    r.insert_nodes(_new_nodes(np.random.default_rng(0), evidence, 3, "b"))
    back.persist(tmp_path, persist_index=True)
    journal = json.loads((tmp_path / "carag" / persistence.JOURNAL_NAME).read_text())
    assert len(journal["segments"]) == 3
    _assert_same(ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb), back, claims)


@pytest.mark.parametrize("fail_on", ["vectors", "ops", "journal"])
def test_a_failure_mid_write_leaves_the_previous_state(corpus, rng, tmp_path, monkeypatch, fail_on):
    evidence, claims, emb = corpus
    r = _fitted(corpus)
    r.persist(tmp_path, persist_index=True)
    r.insert_nodes(_new_nodes(rng, evidence, 3, "a"))
    r.persist(tmp_path, persist_index=True)
    before = _snapshot(ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb))
    r.insert_nodes(_new_nodes(rng, evidence, 3, "b"))
    r.delete_nodes([evidence[0].node_id])
    real = persistence.atomic_write_bytes

    def crash(path, data):
        name = path.name
        if (fail_on == "journal" and name == persistence.JOURNAL_NAME) or name.startswith(f"journal_{fail_on}-"):
            real(path.with_name(f".{name}.partial"), data[: len(data) // 2])  # a half-written temporary file
            raise OSError("killed")
        return real(path, data)

    monkeypatch.setattr(persistence, "atomic_write_bytes", crash)
    with pytest.raises(OSError, match="killed"):
        r.persist(tmp_path, persist_index=True)
    monkeypatch.setattr(persistence, "atomic_write_bytes", real)
    assert _snapshot(ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb)) == before
    r.persist(tmp_path, persist_index=True)  # the journal is unknown after the failure: a full persist
    assert not (tmp_path / "carag" / persistence.JOURNAL_NAME).exists()
    _assert_same(ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb), r, claims)


def test_a_modified_segment_file_is_refused(corpus, rng, tmp_path):
    evidence, _, emb = corpus
    r = _fitted(corpus)
    r.persist(tmp_path, persist_index=True)
    r.insert_nodes(_new_nodes(rng, evidence, 2))
    r.persist(tmp_path, persist_index=True)
    (vectors,) = (tmp_path / "carag").glob("journal_vectors-*.npy")
    data = bytearray(vectors.read_bytes())
    data[-1] ^= 0xFF
    vectors.write_bytes(bytes(data))
    with pytest.raises(StateError, match="checksum"):
        ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb)


def test_compacts_past_the_fraction_and_on_demand(corpus, rng, tmp_path):
    evidence, claims, emb = corpus
    r = _fitted(corpus)
    r.persist(tmp_path, persist_index=True)
    limit = int(journal_mod.COMPACT_FRACTION * len(evidence))
    r.insert_nodes(_new_nodes(rng, evidence, limit - 2, "a"))
    r.persist(tmp_path, persist_index=True)
    assert (tmp_path / "carag" / persistence.JOURNAL_NAME).is_file()
    r.insert_nodes(_new_nodes(rng, evidence, 3, "b"))  # past the fraction: a full persist
    r.persist(tmp_path, persist_index=True)
    assert not (tmp_path / "carag" / persistence.JOURNAL_NAME).exists()
    assert not list((tmp_path / "carag").glob("journal_*"))
    _assert_same(ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb), r, claims)
    r.delete_nodes(["a0"])
    r.persist(tmp_path, persist_index=True, compact=True)
    assert not (tmp_path / "carag" / persistence.JOURNAL_NAME).exists()
    _assert_same(ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb), r, claims)


def test_files_written_by_llamaindex_directly_make_a_full_persist(corpus, rng, tmp_path):
    evidence, claims, emb = corpus
    r = _fitted(corpus)
    r.persist(tmp_path, persist_index=True)
    r.insert_nodes(_new_nodes(rng, evidence, 2))
    r.index.storage_context.persist(persist_dir=str(tmp_path))  # the user's own persist of the index
    r.persist(tmp_path, persist_index=True)
    assert not (tmp_path / "carag" / persistence.JOURNAL_NAME).exists()
    _assert_same(ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb), r, claims)
    # the state alone (the index persisted by the user): no journal, a full state as before
    r.delete_nodes(["new0"])
    r.index.storage_context.persist(persist_dir=str(tmp_path))
    r.persist(tmp_path)
    assert not (tmp_path / "carag" / persistence.JOURNAL_NAME).exists()
    _assert_same(ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb), r, claims)


def test_a_journal_of_another_manifest_is_ignored(corpus, rng, tmp_path):
    """A crash after a full persist replaced the manifest but before it removed the journal."""
    evidence, claims, emb = corpus
    r = _fitted(corpus)
    r.persist(tmp_path, persist_index=True)
    r.insert_nodes(_new_nodes(rng, evidence, 2))
    r.persist(tmp_path, persist_index=True)
    saved = {p.name: p.read_bytes() for p in (tmp_path / "carag").glob("*journal*")}
    r.persist(tmp_path, persist_index=True, compact=True)
    for name, data in saved.items():
        (tmp_path / "carag" / name).write_bytes(data)
    _assert_same(ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb), r, claims)


def test_a_given_index_gets_the_journal_replayed(corpus, rng, tmp_path):
    """An index loaded by the caller from the folder is the base: the journal's edits are replayed on it."""
    from llama_index_carag.stores.faiss_adapter import load_faiss_index

    evidence, claims, emb = corpus
    r = _fitted(corpus)
    r.persist(tmp_path, persist_index=True)
    r.insert_nodes(_new_nodes(rng, evidence, 2))
    r.persist(tmp_path, persist_index=True)
    back = ContextAwareRetriever.from_persist_dir(tmp_path, index=load_faiss_index(tmp_path, emb))
    _assert_same(back, r, claims)
    assert not back.corpus.journal.bound  # a given index is the caller's: the next persist is a full one


def test_a_plain_faiss_index_journals_its_inserts(corpus, rng, tmp_path):
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(faiss_index(evidence, emb), "paper", claim_nodes=claims, **HYBRID)
    r.persist(tmp_path, persist_index=True)
    r.insert_nodes(_new_nodes(rng, evidence, 5))
    r.persist(tmp_path, persist_index=True)
    assert (tmp_path / "carag" / persistence.JOURNAL_NAME).is_file()
    _assert_same(ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb), r, claims)


def test_the_simple_store_is_persisted_in_full(corpus, rng, tmp_path):
    """Its vectors are Python floats: the journal's float32 would not give them back bit for bit."""
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(simple_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3)
    r.persist(tmp_path, persist_index=True)
    r.insert_nodes(_new_nodes(rng, evidence, 2))
    r.persist(tmp_path, persist_index=True)
    assert not (tmp_path / "carag" / persistence.JOURNAL_NAME).exists()
    back = ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb)
    assert _top_k(back, claims) == _top_k(r, claims)


def test_an_index_with_the_edits_already_is_refused_with_a_hint(corpus, rng, tmp_path):
    evidence, _, emb = corpus
    r = _fitted(corpus)
    r.persist(tmp_path, persist_index=True)
    r.insert_nodes(_new_nodes(rng, evidence, 2))
    r.persist(tmp_path, persist_index=True)
    with pytest.raises(StateError, match="journaled"):
        ContextAwareRetriever.from_persist_dir(tmp_path, index=r.index)
