"""retrieval.state: the fitted tables saved and loaded in one loop inside the one atomic state."""

from __future__ import annotations

import json

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.core import persistence
from llama_index_carag.core.persistence import StateError
from llama_index_carag.ranking import assembly
from llama_index_carag.ranking.bm25 import BM25Index
from llama_index_carag.ranking.contrast import ClaimContrast
from llama_index_carag.ranking.hubness import Hubness
from llama_index_carag.retrieval.state import get_tables_state, tables_from_state
from tests.helpers import faiss_index, planted_corpus

HYBRID = dict(
    n_clusters=3, alpha=0.8, rerank_candidates=10, lexical_weight=0.6, claim_contrast=0.3, hub_penalty=0.1, hub_k=3
)


def test_a_saved_state_loads_its_tables_without_refitting(rng, tmp_path, monkeypatch):
    """Every fitted table is in the one atomic state; reloading reads them (no fit) and ranks as before."""
    evidence, claims, emb = planted_corpus(rng)
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, **HYBRID)
    state = r.persist(tmp_path)
    manifest = json.loads((state / persistence.MANIFEST_NAME).read_text())
    assert sorted(e["key"] for e in manifest["info"]["tables"]) == ["claim_contrast", "hubness_3", "lexical"]
    named = {meta["file"] for meta in manifest["arrays"].values()} | {persistence.MANIFEST_NAME}
    assert {p.name for p in state.iterdir()} == named  # every file of the state is in the manifest

    def no_fit(*args, **kwargs):
        raise AssertionError("a saved table was refitted")

    for term in assembly.rerank_terms():
        if term.table is not None:
            monkeypatch.setattr(term.table, "from_corpus", classmethod(no_fit))
    back = ContextAwareRetriever.from_persist_dir(tmp_path, index=index)
    assert set(back.corpus.tables) == {"claim_contrast", "hubness_3", "lexical"}
    assert [s.name for s in back.stage.scorers] == ["dense", "thematic", "lexical", "hubness", "claim_contrast"]
    for claim in claims[:5]:
        got, want = back.retrieve(claim.text), r.retrieve(claim.text)
        assert [h.node.node_id for h in got] == [h.node.node_id for h in want]
        np.testing.assert_allclose([h.score for h in got], [h.score for h in want], atol=1e-6)


def test_crash_before_the_manifest_keeps_every_table_of_the_previous_state(rng, tmp_path, monkeypatch):
    """The BM25 index used to be written before the manifest: a crash left a new BM25 beside old tables."""
    evidence, claims, emb = planted_corpus(rng)
    index = faiss_index(evidence, emb, id_map=True)
    r = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, **HYBRID)
    r.persist(tmp_path)
    changed = evidence[0]
    r.insert_nodes([TextNode(id_=changed.node_id, text="zebrafloop quokkanite", embedding=changed.embedding)])
    assert r.corpus.tables["lexical"].index.query("zebrafloop", 3).ids == [changed.node_id]
    real = persistence.atomic_write_bytes

    def crash_on_manifest(path, data):
        if path.name == persistence.MANIFEST_NAME:
            raise OSError("disk full")
        return real(path, data)

    monkeypatch.setattr(persistence, "atomic_write_bytes", crash_on_manifest)
    with pytest.raises(OSError, match="disk full"):
        r.persist(tmp_path)
    back = ContextAwareRetriever.from_persist_dir(tmp_path, index=index)
    assert (
        back.corpus.tables["lexical"].index.query("zebrafloop", 3).ids == []
    )  # the previous BM25, as the manifest says


class FakeCorpus:
    """A TableCorpus of a few unit vectors and texts."""

    def __init__(self, rng, n=12, m=3, d=6):
        self.units = rng.normal(size=(n, d)).astype(np.float32)
        self.units /= np.linalg.norm(self.units, axis=1, keepdims=True)
        self.claims = self.units[:m] + 0.1
        self.claims /= np.linalg.norm(self.claims, axis=1, keepdims=True)
        self.ids = [f"p{i}" for i in range(n)]
        self.texts = {i: f"passage {i} word{k % 4}" for k, i in enumerate(self.ids)}
        self.exclude_ids = frozenset()

    @property
    def claim_units(self):
        return self.claims

    def evidence_units(self):
        return list(self.ids), self.units

    def evidence_blocks(self):  # two blocks, as a corpus's clusters give them
        half = len(self.ids) // 2
        return [(list(self.ids[:half]), self.units[:half]), (list(self.ids[half:]), self.units[half:])]

    def evidence_ids(self):
        return list(self.ids)

    def nodes(self, ids):
        return [TextNode(id_=i, text=self.texts[i]) if i in self.texts else None for i in ids]


def test_tables_round_trip_through_one_loop(rng):
    from llama_index_carag.settings import CaragSettings

    corpus = FakeCorpus(rng)
    tables = {}
    assembly.fit_tables(corpus, tables, CaragSettings(**HYBRID))
    entries, arrays = get_tables_state(tables)
    assert sorted(e["type"] for e in entries) == ["claim_contrast", "hubness", "lexical"]
    assert all(name.isidentifier() for name in arrays)
    back = tables_from_state(json.loads(json.dumps(entries)), arrays, corpus)
    assert set(back) == set(tables)
    assert isinstance(back["claim_contrast"], ClaimContrast) and isinstance(back["hubness_3"], Hubness)
    np.testing.assert_array_equal(back["claim_contrast"].sims_, tables["claim_contrast"].sims_)
    assert back["hubness_3"].table_ == pytest.approx(tables["hubness_3"].table_)
    for text in ("word1", "passage word3", "nothing"):
        np.testing.assert_allclose(back["lexical"].index.all_scores(text), tables["lexical"].index.all_scores(text))


def test_unreadable_tables_fail_clearly(rng):
    from llama_index_carag.settings import CaragSettings

    corpus = FakeCorpus(rng)
    tables = {}
    assembly.fit_tables(corpus, tables, CaragSettings(**HYBRID))
    entries, arrays = get_tables_state(tables)
    unknown = [dict(entries[0], type="no_such_table")]
    with pytest.raises(StateError, match="unreadable.*no_such_table"):
        tables_from_state(unknown, arrays, corpus)
    missing = {k: v for k, v in arrays.items() if not k.startswith("table_claim_contrast_")}
    with pytest.raises(StateError, match="claim_contrast"):
        tables_from_state(entries, missing, corpus)
    other = FakeCorpus(np.random.default_rng(1), n=5)  # BM25 of other passages
    with pytest.raises(StateError, match="lexical"):
        tables_from_state([e for e in entries if e["key"] == "lexical"], arrays, other)


def test_lexical_state_is_term_counts_as_arrays(rng):
    index = BM25Index().fit(FakeCorpus(rng).nodes([f"p{i}" for i in range(12)]))
    info, arrays = index.get_state()
    assert info["format"] == 2 and set(arrays) == {"indptr", "rows", "tf", "dl"}
    assert all(a.dtype != object for a in arrays.values())
    back = BM25Index.from_state(info, arrays)
    assert back.ids_ == index.ids_
    np.testing.assert_array_equal(back.all_scores("word2 passage"), index.all_scores("word2 passage"))
    with pytest.raises(ValueError, match="do not match"):
        BM25Index.from_state(info, {**arrays, "dl": arrays["dl"][:-1]})
