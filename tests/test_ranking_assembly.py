"""ranking.assembly: the registry of re-ranking terms; the tables, sources and scorers the settings ask of it."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag.ranking import assembly
from llama_index_carag.ranking.bm25 import BM25Relevance, BM25Source, BM25Table
from llama_index_carag.ranking.contrast import ClaimContrast
from llama_index_carag.ranking.fitted_table import FittedTable, TableCorpus, check_table_key
from llama_index_carag.ranking.hubness import Hubness
from llama_index_carag.ranking.rerank_term import RerankTerm, TermScorer
from llama_index_carag.ranking.sources import DenseSource, SearchRequest
from llama_index_carag.settings import PAPER, CaragSettings, weight_range

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
    assert [t.name for t in assembly.rerank_terms()] == ["lexical", "hubness", "claim_contrast"]
    for term in assembly.rerank_terms():
        cls = term.table
        table = cls.from_corpus(ON, corpus)
        assert isinstance(table, FittedTable) and table.key == cls.key_for(ON) and check_table_key(table.key)
        assert assembly.table_type(cls.name) is cls
    with pytest.raises(KeyError, match="unknown fitted table type"):
        assembly.table_type("nope")
    with pytest.raises(ValueError, match="letters, digits"):
        check_table_key("a-b")


def test_terms_read_their_weight_and_range_from_the_settings():
    lexical, hubness, contrast = assembly.rerank_terms()
    assert [t.weight(ON) for t in (lexical, hubness, contrast)] == [0.5, 0.2, 0.3]
    assert lexical.weight_range() == (0.0, 10.0) and contrast.weight_range() == (0.0, 1.0)  # the fields' ge/le
    assert weight_range("lexical_weight") == (0.0, 10.0)
    assert lexical.with_weight(ON, 50.0).lexical_weight == 10.0  # clipped to the range
    assert [t.name for t in assembly.active_terms(ON.replace(hub_penalty=0.0))] == ["lexical", "claim_contrast"]
    assert assembly.active_terms(PAPER) == []
    assert [t.name for t in assembly.rerank_terms() if t.grid] == ["lexical", "claim_contrast"]  # calibrated


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
    assert all(isinstance(s, TermScorer) for s in scorers)
    assert [s.weight(ON, None) for s in scorers] == [0.5, -0.2, -0.3]  # sign * the settings' weight
    assert isinstance(scorers[0].values, BM25Relevance) and scorers[0].values.source is sources[1]
    assert scorers[1].values is tables["hubness_4"]
    assert scorers[2].values.threshold == ON.contrast_threshold
    assert [s.name for s in assembly.settings_scorers(ON, tables, sources[:1])] == ["hubness", "claim_contrast"]
    off = ON.replace(hub_penalty=0.0, lexical_weight=0.0)
    assert [s.name for s in assembly.settings_scorers(off, tables, sources)] == ["claim_contrast"]
    assert len(assembly.default_sources(None, None, corpus, tables, off, native_async=False)) == 1  # type: ignore[arg-type]


def _values(settings, table, sources):
    return table


def test_registry_rules():
    probe = RerankTerm("probe", _values, high=2.0)
    with assembly.registered_term(probe):
        assert assembly.rerank_terms()[-1] is probe
        with pytest.raises(ValueError, match="registered already"):
            assembly.register_term(RerankTerm("probe", _values))
        assert [t.name for t in assembly.active_terms(ON.replace(extra_term_weights={"probe": 1.5}))][-1] == "probe"
        with pytest.raises(ValueError, match=r"must be in \[0, 2\]"):
            probe.weight(ON.replace(extra_term_weights={"probe": 3.0}))
    assert probe not in assembly.rerank_terms()  # unregistered on leaving the block, also after an error
    with pytest.raises(RuntimeError), assembly.registered_term(probe):
        raise RuntimeError
    assert [t.name for t in assembly.rerank_terms()] == ["lexical", "hubness", "claim_contrast"]
    with pytest.raises(ValueError, match="registered already"):
        assembly.register_term(RerankTerm("hubness2", _values, table=Hubness))  # one term per table type
    for bad, match in (
        (dict(name="dense"), "stage's own"),
        (dict(name="a-b"), "letters, digits"),
        (dict(name="x", field="hub_k"), "not a CaragSettings field marked"),
        (dict(name="alpha"), "shadow"),
        (dict(name="x", field="hub_penalty", high=2.0), "the field's own"),
        (dict(name="x", sign=2.0), "sign"),
        (dict(name="x", grid=(-1.0,)), "grid"),
    ):
        with pytest.raises(ValueError, match=match):
            RerankTerm(scorer=_values, **bad)


def test_extra_weights_are_settings_validated_and_json_round_trip():
    s = ON.replace(extra_term_weights={"b": 1, "a": 0.5})
    assert s.extra_term_weights == {"a": 0.5, "b": 1.0} and s.penalties
    assert CaragSettings.model_validate_json(s.model_dump_json()) == s and hash(s) == hash(s.replace())
    assert not PAPER.replace(extra_term_weights={"a": 0.0}).penalties
    with pytest.raises(ValueError, match="needs rerank_candidates"):
        PAPER.replace(extra_term_weights={"a": 0.5})
    with pytest.raises(ValueError, match="letters, digits"):
        ON.replace(extra_term_weights={"a b": 0.5})
    with pytest.raises(ValueError):
        ON.replace(extra_term_weights={"a": -1.0})
    with pytest.raises(TypeError):
        ON.replace(extra_term_weights={"a": "high"})
