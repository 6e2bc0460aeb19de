"""ranking.stage: the one re-ranking stage on a synthetic pool (weights, order, dedupe, filters, provenance)."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_carag.ranking.pool import CandidatePool, RankQuery
from llama_index_carag.ranking.stage import CARAG_METADATA_KEY, RerankStage
from llama_index_carag.settings import PAPER


def unit(v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


class Fixed:
    """A scorer with given per-candidate values and weight."""

    def __init__(self, name, values, weight):
        self.name, self.values, self.w, self.calls = name, np.asarray(values, dtype=np.float64), weight, 0

    def scores(self, pool, query):
        self.calls += 1
        return self.values

    def weight(self, settings, query):
        return self.w


def make(theme=None, texts=("alpha", "beta", "gamma", "delta")):
    vectors = {"a": unit([1, 0, 0]), "b": unit([1, 1, 0]), "c": unit([1, 0, 1]), "d": unit([0, 1, 1])}
    ids = list(vectors)
    hits = [NodeWithScore(node=TextNode(id_=i, text=t), score=s) for i, t, s in zip(ids, texts, (0.4, 0.3, 0.2, 0.1))]
    pool = CandidatePool.build(hits, unit([1, 0, 0]), lambda ids: ([vectors[i] for i in ids], [7] * len(ids)))
    query = RankQuery("claim", unit([1, 0, 0]), theme, {"b": "item"}, 1, 7, None, None, "unsupervised")
    return pool, query


def test_score_is_the_weighted_sum_of_the_active_terms():
    pool, query = make()  # no theme: dense weight 1, thematic 0
    extra = Fixed("extra", [0.0, 1.0, 0.0, 2.0], 0.5)
    off = Fixed("off", [9.0] * 4, 0.0)
    final, terms = RerankStage(PAPER, [extra, off]).score(pool, query)
    np.testing.assert_allclose(final, pool.columns["dense"] + 0.5 * extra.values)
    assert set(terms) == {"dense", "extra"} and off.calls == 0  # a zero weight is never computed


def test_thematic_weight_follows_alpha_when_there_is_a_theme():
    pool, query = make(theme=unit([0, 1, 0]))
    settings = PAPER.replace(alpha=0.25)
    final, terms = RerankStage(settings).score(pool, query)
    np.testing.assert_allclose(final, 0.25 * pool.columns["dense"] + 0.75 * pool.similarity(unit([0, 1, 0])), atol=1e-6)
    assert set(terms) == {"dense", "thematic"}


def test_rank_orders_limits_and_writes_provenance():
    pool, query = make()
    boost = Fixed("boost", [0.0, 0.0, 0.0, 5.0], 1.0)
    out = RerankStage(PAPER, [boost]).rank(pool, query, limit=3, extra={"reranked": True})
    assert [n.node.node_id for n in out] == ["d", "a", "b"]
    info = out[0].node.metadata[CARAG_METADATA_KEY]
    assert info["terms"]["boost"] == 5.0 and info["reranked"] is True and info["cluster"] == 7
    assert out[0].score == pytest.approx(float(pool.columns["dense"][3]) + 5.0)
    assert (
        out[2].node.metadata[CARAG_METADATA_KEY]["in_soi"]
        and out[2].node.metadata[CARAG_METADATA_KEY]["soi_kind"] == "item"
    )
    assert CARAG_METADATA_KEY not in pool.nodes[0].node.metadata  # annotated copies, the pool's nodes untouched


def test_unknown_vectors_sort_last_with_no_score():
    vectors = {"a": unit([1, 0, 0])}
    hits = [NodeWithScore(node=TextNode(id_=i, text=i), score=0.5) for i in ("z", "a")]
    pool = CandidatePool.build(hits, unit([1, 0, 0]), lambda ids: ([vectors.get(i) for i in ids], [None] * len(ids)))
    query = RankQuery("q", unit([1, 0, 0]), None, {}, 0, None, None, None, "unsupervised")
    out = RerankStage(PAPER).rank(pool, query)
    assert [n.node.node_id for n in out] == ["a", "z"] and out[1].score is None
    assert out[1].node.metadata[CARAG_METADATA_KEY]["claim_similarity"] is None


def test_dedupe_keep_and_callable_extra():
    pool, query = make(texts=("Same  text", "same text", "other", "more"))
    out = RerankStage(PAPER).rank(
        pool,
        query,
        dedupe=True,
        extra=lambda row: {"row": row},
        keep=lambda row, info: info["row"] != 2,
    )
    ids = [n.node.node_id for n in out]
    assert "c" not in ids and len([i for i in ids if i in ("a", "b")]) == 1
    assert all(n.node.metadata[CARAG_METADATA_KEY]["row"] == ["a", "b", "c", "d"].index(n.node.node_id) for n in out)


def test_without_rerank_the_sources_order_and_scores_stay():
    pool, query = make()
    out = RerankStage(PAPER, [Fixed("boost", [0, 0, 0, 9], 1.0)]).rank(pool, query, rerank=False)
    assert [(n.node.node_id, n.score) for n in out] == [("a", 0.4), ("b", 0.3), ("c", 0.2), ("d", 0.1)]
    assert "terms" not in out[0].node.metadata[CARAG_METADATA_KEY]


def test_a_scorer_named_like_a_base_term_replaces_it():
    pool, query = make()
    mine = Fixed("dense", [1.0, 2.0, 3.0, 4.0], 1.0)
    stage = RerankStage(PAPER, [mine])
    assert [s.name for s in stage.scorers] == ["thematic", "dense"]
    assert [n.node.node_id for n in stage.rank(pool, query)] == ["d", "c", "b", "a"]


@pytest.mark.parametrize(("filled", "size", "weight"), [(0, 4, 0.2), (3, 4, 0.05), (3, 3, 0.0)])
def test_the_thematic_weight_is_the_share_of_the_soi_not_filled_below_delta(filled, size, weight):
    from llama_index_carag.ranking.stage import DenseSimilarity, ThematicSimilarity

    settings = PAPER.replace(alpha=0.8)
    query = RankQuery("q", unit([1, 0, 0]), unit([0, 1, 0]), {}, size, 0, None, None, "unsupervised", filled)
    assert ThematicSimilarity().weight(settings, query) == pytest.approx(weight)
    assert DenseSimilarity().weight(settings, query) == pytest.approx(1 - weight)  # the two still sum to 1
    empty = RankQuery("q", unit([1, 0, 0]), None, {}, 0, 0, None, None, "unsupervised", 0)
    assert ThematicSimilarity().weight(settings, empty) == 0 and DenseSimilarity().weight(settings, empty) == 1
