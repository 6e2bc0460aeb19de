"""LexicalIndex: BM25 as llama-index-retrievers-bm25 computes it, persisted without pickle."""

from __future__ import annotations

import json

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag.ranking.bm25 import LegacyLexicalState, LexicalIndex


@pytest.fixture(scope="module")
def nodes(demo_corpus):
    return demo_corpus.evidence_nodes


def test_matches_the_bm25_integration(nodes, demo_corpus):
    from llama_index.retrievers.bm25 import BM25Retriever

    index = LexicalIndex().fit(nodes)
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
    index = LexicalIndex().fit(nodes)
    hits = index.query(nodes[3].get_content(), 5)
    assert hits.ids[0] == nodes[3].node_id
    looked = index.lookup(hits, [hits.ids[0], "not-indexed"])
    assert looked[0] == pytest.approx(float(hits.scores[0]))
    assert looked[1] == 0.0
    assert hits.all_scores.shape == (len(nodes),)


def test_no_matching_term_gives_no_hits(nodes):
    index = LexicalIndex().fit(nodes)
    for text in ("", "   ", "zzqxv qqqzz", "!!!"):
        hits = index.query(text, 5)
        assert hits.ids == [] and not hits.all_scores.any()


def test_label_metadata_is_not_indexed():
    secret = TextNode(
        id_="a", text="wind farms and fish", metadata={"label": "REFUTED"}, excluded_embed_metadata_keys=["label"]
    )
    other = TextNode(id_="b", text="solar panels on roofs")
    index = LexicalIndex().fit([secret, other])
    assert index.query("refuted", 2).ids == []
    assert index.query("fish", 2).ids == ["a"]


def test_persist_round_trip(tmp_path, nodes):
    index = LexicalIndex().fit(nodes)
    index.persist(tmp_path / "bm25")
    again = LexicalIndex.from_persist_dir(tmp_path / "bm25")
    text = nodes[5].get_content()
    assert again.ids_ == index.ids_
    assert np.array_equal(again.all_scores(text), index.all_scores(text))
    assert not list((tmp_path / "bm25").glob("*.pkl"))


def test_bad_input_is_refused(tmp_path, nodes):
    with pytest.raises(ValueError, match="at least one"):
        LexicalIndex().fit([])
    with pytest.raises(ValueError, match="duplicated"):
        LexicalIndex().fit([nodes[0], nodes[0]])
    with pytest.raises(ValueError, match="k1"):
        LexicalIndex(k1=0)
    with pytest.raises(RuntimeError, match="not fitted"):
        LexicalIndex().query("x", 3)
    with pytest.raises(FileNotFoundError):
        LexicalIndex.from_persist_dir(tmp_path / "nothing")
    index = LexicalIndex().fit(nodes)
    index.persist(tmp_path / "bad")
    meta = json.loads((tmp_path / "bad" / "carag_lexical_ids.json").read_text(encoding="utf-8"))
    (tmp_path / "bad" / "carag_lexical_ids.json").write_text(json.dumps({**meta, "ids": ["only-one"]}))
    with pytest.raises(ValueError, match="do not match its ids"):
        LexicalIndex.from_persist_dir(tmp_path / "bad")
    (tmp_path / "bad" / "carag_lexical_ids.json").write_text('{"ids": ["only-one"]}', encoding="utf-8")
    with pytest.raises(LegacyLexicalState, match="earlier version"):  # format 1: bm25s's own files
        LexicalIndex.from_persist_dir(tmp_path / "bad")
