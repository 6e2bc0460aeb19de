"""ranking.assembly: which fitted tables, sources and scorers the settings ask for; fit, update, persist loops."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag.ranking import assembly
from llama_index_carag.ranking.bm25 import BM25Relevance, BM25Source, BM25Table
from llama_index_carag.ranking.contrast import ClaimContrast
from llama_index_carag.ranking.protocols import SearchRequest
from llama_index_carag.ranking.scorers import Hubness
from llama_index_carag.ranking.sources import DenseSource
from llama_index_carag.ranking.tables import FittedTable, TableCorpus, check_table_key
from llama_index_carag.settings import PAPER

ON = PAPER.replace(rerank_candidates=10, lexical_weight=0.5, hub_penalty=0.2, hub_k=4, claim_contrast=0.3)


class Corpus:
    def __init__(self, n=10, d=5, claims=True):
        rng = np.random.default_rng(3)
        self.units = rng.normal(size=(n, d)).astype(np.float32)
        self.units /= np.linalg.norm(self.units, axis=1, keepdims=True)
        self.ids = [f"e{i}" for i in range(n)]
        self.claim_units = self.units[:2].copy() if claims else None
        self.exclude_ids = frozenset({"e9"})

    def evidence_units(self):
        return list(self.ids), self.units

    def evidence_blocks(self):  # two blocks, as a corpus's clusters give them
        half = len(self.ids) // 2
        return [(list(self.ids[:half]), self.units[:half]), (list(self.ids[half:]), self.units[half:])]

    def evidence_ids(self):
        return list(self.ids)

    def nodes(self, ids):
        return [TextNode(id_=i, text=f"passage {i} topic{int(i[1:]) % 3}") for i in ids]


def test_the_three_tables_follow_the_protocol():
    corpus = Corpus()
    assert isinstance(corpus, TableCorpus)
    for cls in assembly.TABLE_TYPES:
        table = cls.from_corpus(ON, corpus)
        assert isinstance(table, FittedTable) and table.key == cls.key_for(ON) and check_table_key(table.key)
        assert assembly.table_type(cls.name) is cls
    with pytest.raises(KeyError, match="unknown fitted table type"):
        assembly.table_type("nope")
    with pytest.raises(ValueError, match="letters, digits"):
        check_table_key("a-b")


def test_wanted_tables_follow_the_weights():
    assert assembly.wanted_tables(PAPER) == {}
    assert assembly.wanted_tables(ON) == {
        "lexical": BM25Table,
        "hubness_4": Hubness,
        "claim_contrast": ClaimContrast,
    }
    assert list(assembly.wanted_tables(ON.replace(lexical_weight=0.0, hub_k=7))) == ["hubness_7", "claim_contrast"]


def test_fit_tables_fits_only_what_is_missing(monkeypatch):
    corpus, tables = Corpus(), {}
    assert assembly.fit_tables(corpus, tables, ON) == ["lexical", "hubness_4", "claim_contrast"]
    before = dict(tables)
    assert assembly.fit_tables(corpus, tables, ON) == []  # a no-op when fitted
    assert all(tables[k] is before[k] for k in before)
    assert assembly.fit_tables(corpus, tables, ON.replace(hub_k=2)) == ["hubness_2"]  # one table per hub_k
    assert {"hubness_2", "hubness_4"} <= set(tables)
    with pytest.raises(ValueError, match="claim_contrast needs the corpus's claims"):
        assembly.fit_tables(Corpus(claims=False), {}, ON)


def test_update_tables_keeps_contrast_and_bm25_and_drops_hubness():
    corpus, tables = Corpus(), {}
    assembly.fit_tables(corpus, tables, ON)
    assert assembly.update_tables(corpus, tables, []) == []  # nothing changed: all kept
    contrast, lexical = tables["claim_contrast"], tables["lexical"]
    assert assembly.update_tables(corpus, tables, ["e1"]) == ["hubness_4"]  # BM25 updates in place (segments)
    assert tables == {"claim_contrast": contrast, "lexical": lexical}
    assert "e1" not in contrast.get_state()[0]["ids"]


def test_sources_and_scorers_of_the_active_tables():
    corpus, tables = Corpus(), {}
    assembly.fit_tables(corpus, tables, ON)
    sources = assembly.default_sources(None, None, corpus, tables, ON, native_async=False)  # type: ignore[arg-type]
    assert [type(s) for s in sources] == [DenseSource, BM25Source]
    assert sources[1].search_ids(SearchRequest("topic1 e9 e4", []), 10)[0] == "e4"  # e9 is excluded
    scorers = assembly.settings_scorers(ON, tables, sources)
    assert [s.name for s in scorers] == ["lexical", "hubness", "claim_contrast"]
    assert isinstance(scorers[0], BM25Relevance) and scorers[0].source is sources[1]
    assert scorers[2].threshold == ON.contrast_threshold
    assert [s.name for s in assembly.settings_scorers(ON, tables, sources[:1])] == ["hubness", "claim_contrast"]
    off = ON.replace(hub_penalty=0.0, lexical_weight=0.0)
    assert [s.name for s in assembly.settings_scorers(off, tables, sources)] == ["claim_contrast"]
    assert len(assembly.default_sources(None, None, corpus, tables, off, native_async=False)) == 1  # type: ignore[arg-type]


class Probe:
    """A test-only fitted table: each passage's first vector component (on when hub_penalty > 0)."""

    name = "probe"
    key = "probe"

    def __init__(self, values):
        self.values = values

    @classmethod
    def key_for(cls, settings):
        return cls.key if settings.hub_penalty > 0 else None

    @classmethod
    def from_corpus(cls, settings, corpus):
        ids, units = corpus.evidence_units()
        return cls(dict(zip(ids, units[:, 0].tolist())))

    def update(self, corpus, changed):
        return False

    def sources(self, corpus):
        return []

    def scorers(self, settings, sources):
        return []

    def get_state(self):
        ids = list(self.values)
        return {"ids": ids}, {"values": np.array([self.values[i] for i in ids])}

    @classmethod
    def from_state(cls, info, arrays, corpus):
        return cls(dict(zip(info["ids"], arrays["values"].tolist())))


def test_a_new_table_type_is_fitted_and_persisted_with_no_other_edit(monkeypatch):
    from llama_index_carag.retrieval.state import tables_from_state, tables_state

    monkeypatch.setattr(assembly, "TABLE_TYPES", (*assembly.TABLE_TYPES, Probe))
    corpus, tables = Corpus(), {}
    assert "probe" in assembly.fit_tables(corpus, tables, ON)
    entries, arrays = tables_state(tables)
    back = tables_from_state(entries, arrays, corpus)
    assert isinstance(back["probe"], Probe) and back["probe"].values == pytest.approx(tables["probe"].values)
