"""ranking.pool: the candidate pool as parallel arrays, built from hits or from ids (nodes loaded lazily)."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_carag.ranking.pool import CandidatePool, RankQuery


def unit(v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


VECTORS = {"a": unit([1, 0, 0]), "b": unit([1, 1, 0]), "c": unit([0, 0, 1])}


def lookup(ids):
    return [VECTORS.get(i) for i in ids], [{"a": 0, "b": 0, "c": 1}.get(i) for i in ids]


def hit(node_id, score, embedding=None):
    return NodeWithScore(node=TextNode(id_=node_id, text=f"text {node_id}", embedding=embedding), score=score)


def test_build_keeps_the_first_hit_of_an_id_and_the_sources_scores():
    q = unit([1, 0, 0])
    pool = CandidatePool.build([hit("a", 0.9), hit("b", 0.5), hit("a", 0.1), hit("c", 0.2)], q, lookup)
    assert pool.ids == ["a", "b", "c"] and len(pool) == 3
    assert pool.source_scores() == [0.9, 0.5, 0.2]
    np.testing.assert_allclose(pool.columns["dense"], [1.0, np.sqrt(0.5), 0.0], atol=1e-6)
    assert pool.clusters == [0, 0, 1] and pool.known.all()


def test_unknown_vectors_fall_back_to_the_nodes_embedding_or_stay_unknown():
    q = unit([0, 1, 0])
    pool = CandidatePool.build([hit("x", 0.3, embedding=[0.0, 2.0, 0.0]), hit("y", 0.2)], q, lookup)
    assert pool.known.tolist() == [True, False]
    np.testing.assert_allclose(pool.units[0], [0, 1, 0])  # normalised
    assert pool.columns["dense"].tolist() == pytest.approx([1.0, 0.0])
    vectors = pool.vectors()
    assert vectors[1] is None and vectors[0] is not None
    assert pool.clusters == [None, None]


def test_from_ids_loads_only_the_nodes_asked_for_once():
    calls = []

    def loader(ids):
        calls.append(list(ids))
        return [TextNode(id_=i, text=i) if i != "c" else None for i in ids]

    pool = CandidatePool.from_ids(["b", "a", "b", "c"], unit([1, 0, 0]), lookup, loader)
    assert pool.ids == ["b", "a", "c"] and calls == []
    pool.prefetch([1])
    assert pool.node_at(1).node_id == "a" and calls == [["a"]]
    assert pool.node_at(1).node_id == "a" and calls == [["a"]]  # not read again
    assert pool.node_at(2) is None  # the store has no such node
    assert pool.source_scores() == [None, None, None]


def test_similarity_of_an_empty_pool_and_of_another_vector():
    empty = CandidatePool.build([], unit([1, 0, 0]), lookup)
    assert len(empty) == 0 and empty.similarity(unit([1, 0, 0])).shape == (0,)
    pool = CandidatePool.build([hit("a", 1.0), hit("c", 0.5)], unit([1, 0, 0]), lookup)
    np.testing.assert_allclose(pool.similarity(unit([0, 0, 1])), [0.0, 1.0], atol=1e-6)


def test_rank_query_fallback_is_an_empty_soi():
    base = dict(
        query_str="q",
        unit=unit([1, 0, 0]),
        kinds={},
        soi_size=0,
        query_cluster=None,
        query_theme=None,
        claim_id=None,
        mode="unsupervised",
    )
    assert RankQuery(theme_unit=None, **base).fallback
    assert not RankQuery(theme_unit=unit([0, 1, 0]), **base).fallback
