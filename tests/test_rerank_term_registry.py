"""A new re-ranking term is one ``RerankTerm``: registered here, in the test module alone, with no package file edited.

The term is real: a keyword-overlap prior ``o(n)`` = the share of the claim's words found in the passage, read from a
fitted table of each passage's distinct words.  It is fitted with the corpus, re-weighted by the per-corpus
calibration, updated on an insert, persisted with the retriever and reloaded, and its value is shown in
``node.metadata["carag"]["terms"]["overlap"]``.  The registration lives in a fixture and is undone after each test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.core.persistence import MANIFEST_NAME, StateError
from llama_index_carag.datasets import LINKS_KEY
from llama_index_carag.ranking import assembly
from llama_index_carag.ranking.rerank_term import RerankTerm
from llama_index_carag.settings import DEFAULT, CaragSettings
from tests.helpers import TableEmbedding, faiss_index, unit

N_CLAIMS = 60
DIM = 32


def words(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z]+", text.lower()))


class KeywordTable:
    """Fitted per-passage table: each evidence passage's distinct words (a ``FittedTable``)."""

    name = "test_keywords"
    key = "test_keywords"

    def __init__(self) -> None:
        self.words_: dict[str, frozenset[str]] = {}

    @classmethod
    def key_for(cls, settings: CaragSettings) -> str:
        return cls.key

    @classmethod
    def from_corpus(cls, settings: CaragSettings, corpus: Any) -> KeywordTable:
        table = cls()
        table._add(corpus, corpus.evidence_ids())
        return table

    def _add(self, corpus: Any, ids: Sequence[str]) -> None:
        for node in corpus.nodes(list(ids)):
            if node is not None:
                self.words_[node.node_id] = words(node.get_content())

    def update(self, corpus: Any, changed: Sequence[str]) -> bool:
        for node_id in changed:
            self.words_.pop(node_id, None)
        self._add(corpus, [i for i in changed if i not in corpus.exclude_ids])
        return True

    def sources(self, corpus: Any) -> list:
        return []

    def scores(self, pool: Any, query: Any) -> np.ndarray:
        asked = words(query.query_str)
        return np.array([len(asked & self.words_.get(i, frozenset())) / max(1, len(asked)) for i in pool.ids])

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        ids = sorted(self.words_)
        return {"ids": ids, "words": [sorted(self.words_[i]) for i in ids]}, {}

    @classmethod
    def from_state(cls, info: dict[str, Any], arrays: dict[str, np.ndarray], corpus: Any) -> KeywordTable:
        table = cls()
        table.words_ = {i: frozenset(w) for i, w in zip(info["ids"], info["words"], strict=True)}
        return table


OVERLAP = RerankTerm(
    "overlap", lambda settings, table, sources: table, high=1.0, grid=(0.0, 1.0, 5.0), table=KeywordTable
)

#: Hybrid re-ranking without BM25 and claim contrast, so that the new term is the one that matters.
BASE = DEFAULT.replace(
    similarity_top_k=10,
    rerank_candidates=20,
    lexical_weight=0.0,
    claim_contrast=0.0,
    extra_term_weights={"overlap": 0.1},
)


@pytest.fixture()
def overlap_term() -> Iterator[RerankTerm]:
    with assembly.registered_term(OVERLAP) as term:
        yield term
    assert OVERLAP not in assembly.rerank_terms()


def _word(rng: np.random.Generator) -> str:
    return "".join(rng.choice(list("bcdfghjklmnpqrstvwxz"), size=7))


def _node(node_id: str, text: str, vector: np.ndarray, metadata: dict | None = None) -> TextNode:
    meta = dict(metadata or {})
    keys = list(meta)
    return TextNode(id_=node_id, text=text, metadata=meta, embedding=vector.tolist(),
                    excluded_embed_metadata_keys=keys, excluded_llm_metadata_keys=keys)  # fmt: skip


def keyword_corpus(seed: int = 0):
    """Each claim's gold passage shares two of its three words but lies further from it than a decoy that
    shares none: dense similarity ranks the decoy first, the overlap term the gold passage."""
    rng = np.random.default_rng(seed)
    evidence, claims, table = [], [], {}
    for i in range(N_CLAIMS):
        c_vec = unit(rng.normal(size=DIM))
        claim_words = [_word(rng) for _ in range(3)]
        gold_text = " ".join(claim_words[:2] + [_word(rng) for _ in range(4)])
        decoy_text = " ".join(_word(rng) for _ in range(5))
        gold_vec = unit(c_vec + 0.9 * unit(rng.normal(size=DIM)))
        decoy_vec = unit(c_vec + 0.5 * unit(rng.normal(size=DIM)))
        for node_id, text, vec in ((f"g{i}", gold_text, gold_vec), (f"d{i}", decoy_text, decoy_vec)):
            table[text] = vec
            evidence.append(_node(node_id, text, vec))
        text = " ".join(claim_words)
        table[text] = c_vec
        claims.append(_node(f"c{i}", text, c_vec, {LINKS_KEY: [f"g{i}"]}))
    return evidence, claims, TableEmbedding({k: v.tolist() for k, v in table.items()})


@pytest.fixture(scope="module")
def corpus():
    return keyword_corpus()


def _top(retriever: ContextAwareRetriever, claims: list[TextNode], n: int = 20) -> list[str]:
    return [retriever.retrieve(c.get_content())[0].node.node_id for c in claims[:n]]


def test_the_term_is_fitted_and_changes_rankings(overlap_term, corpus):
    evidence, claims, model = corpus
    index = faiss_index(evidence, model)
    on = ContextAwareRetriever.from_index(index, BASE.replace(extra_term_weights={"overlap": 0.5}), claim_nodes=claims)
    assert isinstance(on.corpus.tables["test_keywords"], KeywordTable)  # fitted with the corpus
    assert [s.name for s in on.stage.scorers] == ["dense", "thematic", "overlap"]
    off = on.with_settings(extra_term_weights={})
    assert "overlap" not in [s.name for s in off.stage.scorers]
    assert sum(t.startswith("d") for t in _top(off, claims)) >= 18  # dense alone: the decoys
    assert all(t.startswith("g") for t in _top(on, claims))  # with the term: the gold passages
    hit = on.retrieve(claims[0].get_content())[0]
    assert hit.node.metadata["carag"]["terms"]["overlap"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        on.with_settings(extra_term_weights={"overlap": 2.0})  # the term's own range


def test_calibration_reweights_the_term_and_it_persists(overlap_term, corpus, tmp_path):
    evidence, claims, model = corpus
    index = faiss_index(evidence, model, id_map=True)
    r = ContextAwareRetriever.from_index(index, BASE, claim_nodes=claims, calibrate=True)
    cal = r.corpus.calibration
    assert cal.reason == "calibrated" and cal.gain > 0.1
    assert cal.weights["overlap"] == 0.5 and cal.base.extra_term_weights == {"overlap": 0.1}  # 5 x the preset's
    assert {row["factors"]["overlap"] for row in cal.candidates} == {0.0, 1.0, 5.0}
    assert r.settings.extra_term_weights == {"overlap": 0.5}
    meta = r.retrieve(claims[1].get_content())[0].node.metadata["carag"]
    assert meta["calibration"]["weights"]["overlap"] == 0.5 and "overlap" in meta["terms"]

    r.insert_nodes([_node("new", "fresh passage " + claims[2].get_content(), np.asarray(claims[2].embedding))])
    assert r.corpus.tables["test_keywords"].words_["new"] >= words(claims[2].get_content())  # updated in place
    assert r.retrieve(claims[2].get_content())[0].node.node_id == "new"

    state = r.persist(tmp_path)
    saved = json.loads((state / MANIFEST_NAME).read_text())["info"]
    assert saved["settings"]["extra_term_weights"] == {"overlap": 0.5}
    assert [e["type"] for e in saved["tables"]] == ["test_keywords"]
    back = ContextAwareRetriever.from_persist_dir(tmp_path, index=index)
    assert (
        back.settings == r.settings
        and back.corpus.tables["test_keywords"].words_ == r.corpus.tables["test_keywords"].words_
    )
    for claim in claims[:10]:
        got, want = back.retrieve(claim.get_content()), r.retrieve(claim.get_content())
        assert [h.node.node_id for h in got] == [h.node.node_id for h in want]
        assert [h.node.metadata["carag"]["terms"] for h in got] == [h.node.metadata["carag"]["terms"] for h in want]


def test_without_the_term_registered_its_state_does_not_load(corpus, tmp_path):
    evidence, claims, model = corpus
    index = faiss_index(evidence, model)
    with assembly.registered_term(OVERLAP):
        ContextAwareRetriever.from_index(index, BASE, claim_nodes=claims).persist(tmp_path)
    assert "overlap" not in [t.name for t in assembly.rerank_terms()]
    with pytest.raises(StateError, match="unknown fitted table type 'test_keywords'"):
        ContextAwareRetriever.from_persist_dir(tmp_path, index=index)
