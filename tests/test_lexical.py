"""BM25Index: BM25 as llama-index-retrievers-bm25 computes it, its state as JSON and arrays (no pickle)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from llama_index.core.schema import TextNode
from sklearn.exceptions import NotFittedError

from llama_index_carag.ranking.bm25 import BM25Index


@pytest.fixture(scope="module")
def nodes(demo_corpus):
    return demo_corpus.evidence_nodes


def test_matches_the_bm25_integration(nodes, demo_corpus):
    from llama_index.retrievers.bm25 import BM25Retriever

    index = BM25Index().fit(nodes)
    stock = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=8)
    for claim in demo_corpus.claim_nodes[:10]:
        text = claim.get_content()
        ours = index.query(text, 8)
        theirs = stock.retrieve(text)
        theirs = [t for t in theirs if t.score > 0]
        assert np.allclose(ours.scores, [t.score for t in theirs], atol=1e-5)
        # same scores, same ids up to the order of exact ties
        by_score = {}
        for t in theirs:
            by_score.setdefault(round(t.score, 5), set()).add(t.node.node_id)
        for node_id, score in zip(ours.ids, ours.scores):
            assert node_id in by_score[round(float(score), 5)]


def test_lookup_gives_candidate_scores(nodes):
    index = BM25Index().fit(nodes)
    hits = index.query(nodes[3].get_content(), 5)
    assert hits.ids[0] == nodes[3].node_id
    looked = index.lookup(hits, [hits.ids[0], "not-indexed"])
    assert looked[0] == pytest.approx(float(hits.scores[0]))
    assert looked[1] == 0.0
    assert hits.all_scores.shape == (len(nodes),)


def test_no_matching_term_gives_no_hits(nodes):
    index = BM25Index().fit(nodes)
    for text in ("", "   ", "zzqxv qqqzz", "!!!"):
        hits = index.query(text, 5)
        assert hits.ids == [] and not hits.all_scores.any()


def test_label_metadata_is_not_indexed():
    secret = TextNode(
        id_="a", text="wind farms and fish", metadata={"label": "REFUTED"}, excluded_embed_metadata_keys=["label"]
    )
    other = TextNode(id_="b", text="solar panels on roofs")
    index = BM25Index().fit([secret, other])
    assert index.query("refuted", 2).ids == []
    assert index.query("fish", 2).ids == ["a"]


def test_state_round_trip(nodes):
    index = BM25Index().fit(nodes)
    info, arrays = index.get_state()
    json.dumps(info)  # JSON-safe
    assert all(a.dtype != object for a in arrays.values())
    again = BM25Index.from_state(info, arrays)
    text = nodes[5].get_content()
    assert again.ids_ == index.ids_
    assert np.array_equal(again.all_scores(text), index.all_scores(text))


def test_bad_input_is_refused(nodes):
    with pytest.raises(ValueError, match="at least one"):
        BM25Index().fit([])
    with pytest.raises(ValueError, match="duplicated"):
        BM25Index().fit([nodes[0], nodes[0]])
    with pytest.raises(ValueError, match="'k1' parameter"):  # validated by fit (scikit-learn style)
        BM25Index(k1=0).fit(nodes)
    with pytest.raises(NotFittedError):
        BM25Index().query("x", 3)
    info, arrays = BM25Index().fit(nodes).get_state()
    with pytest.raises(ValueError, match="do not match its ids"):
        BM25Index.from_state({**info, "ids": ["only-one"]}, arrays)
    with pytest.raises(ValueError, match="format"):  # another format (bm25s's precomputed scores had 1)
        BM25Index.from_state({**info, "format": 1}, arrays)
