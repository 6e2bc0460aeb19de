"""The retriever's optional variants, each against a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag import ContextAwareRetriever
from tests.helpers import TableEmbedding, faiss_index, planted_corpus


@pytest.fixture()
def corpus(rng):
    return planted_corpus(rng)


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def test_soi_top_m_keeps_the_most_similar(corpus):
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(faiss_index(evidence, emb), claim_nodes=claims, n_clusters=3, delta=-1.0, soi_top_m=4)
    for claim in claims[:4]:
        soi = r.build_soi(claim.text)
        assert len(soi) == 4
        cluster = r.context.cluster_of(claim.node_id)
        q = unit(claim.embedding)
        pool = sorted((float(unit(e.embedding) @ q), e.node_id) for e in evidence if r.context.cluster_of(e.node_id) == cluster)
        assert {i for _, i in pool[-4:]} == set(soi.item_ids)


def test_rerank_reorders_the_claim_neighbourhood(corpus):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, claim_nodes=claims, n_clusters=3, delta=0.3, alpha=0.6, rerank_candidates=10)
    by_id = {e.node_id: unit(e.embedding) for e in evidence}
    for claim in claims[::3]:
        pool = [n.node.node_id for n in index.as_retriever(similarity_top_k=10).retrieve(claim.text)]
        t = unit(r.build_soi(claim.text).thematic_embedding)
        q = unit(claim.embedding)
        expect = sorted(pool, key=lambda i: -(0.6 * by_id[i] @ q + 0.4 * by_id[i] @ t))[:6]
        got = r.retrieve(claim.text)
        assert [n.node.node_id for n in got] == expect
        assert all(n.node.metadata["carag"]["reranked"] for n in got)


def test_related_claims_and_hub_penalty(corpus):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(
        index, claim_nodes=claims, n_clusters=3, delta=0.9, alpha=0.8, rerank_candidates=12, soi_claims=2, hub_penalty=0.2, hub_k=3
    )
    E = np.array([unit(e.embedding) for e in evidence])
    sims = E @ E.T
    np.fill_diagonal(sims, -1)
    hub = {e.node_id: float(np.sort(sims[i])[-3:].mean()) for i, e in enumerate(evidence)}
    for claim in claims[::4]:
        soi = r.build_soi(claim.text)
        related = [i.id for i in soi.related_claims]
        cluster = r.context.cluster_of(claim.node_id)
        q = unit(claim.embedding)
        ranked = sorted(
            (c for c in claims if c.node_id != claim.node_id and r.context.cluster_of(c.node_id) == cluster),
            key=lambda c: -(unit(c.embedding) @ q),
        )
        assert related == [c.node_id for c in ranked[:2]]
        assert claim.node_id not in related
        t = unit(soi.thematic_embedding)
        pool = [n.node.node_id for n in index.as_retriever(similarity_top_k=12).retrieve(claim.text)]
        by_id = dict(zip([e.node_id for e in evidence], E))
        score = {i: 0.8 * by_id[i] @ q + 0.2 * by_id[i] @ t - 0.2 * hub[i] for i in pool}
        got = r.retrieve(claim.text)
        assert [n.node.node_id for n in got] == sorted(pool, key=lambda i: -score[i])[:6]
        np.testing.assert_allclose([n.score for n in got], sorted(score.values(), reverse=True)[:6], rtol=1e-5)


def test_hub_penalty_needs_rerank(corpus):
    evidence, claims, emb = corpus
    with pytest.raises(ValueError, match="hub_penalty needs rerank_candidates"):
        ContextAwareRetriever.from_index(faiss_index(evidence, emb), claim_nodes=claims, n_clusters=3, hub_penalty=0.1)
    r = ContextAwareRetriever.from_index(faiss_index(evidence, emb), claim_nodes=claims, n_clusters=3)
    r.hub_penalty = 0.1  # set without re-ranking: refused at query time
    with pytest.raises(ValueError, match="hub_penalty needs rerank_candidates"):
        r.retrieve(claims[0].text)


def test_dedupe_returns_distinct_texts(rng):
    base = [unit(rng.normal(size=8)) for _ in range(6)]
    nodes, table = [], {}
    for i, v in enumerate(base):
        for copy in range(3):  # every text three times under different ids
            nodes.append(TextNode(id_=f"e{i}_{copy}", text=f"passage {i}", embedding=v.tolist()))
        table[f"passage {i}"] = v
    table["q"] = base[0]
    emb = TableEmbedding({k: v.tolist() for k, v in table.items()})
    r = ContextAwareRetriever.from_index(faiss_index(nodes, emb), n_clusters=2, similarity_top_k=4, dedupe=True)
    got = r.retrieve("q")
    texts = [n.node.text for n in got]
    assert len(got) == 4 and len(set(texts)) == 4 and texts[0] == "passage 0"
    r.dedupe = False
    assert len({n.node.text for n in r.retrieve("q")}) < 4


def test_options_survive_persistence(corpus, tmp_path):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(
        index, claim_nodes=claims, n_clusters=3, alpha=0.8, rerank_candidates=20, soi_claims=1, hub_penalty=0.15,
        dedupe=True, soi_top_m=5,
    )
    r.persist(tmp_path)
    back = ContextAwareRetriever.from_persist_dir(tmp_path, index=index)
    assert (back.rerank_candidates, back.soi_claims, back.hub_penalty, back.dedupe, back.soi_top_m) == (20, 1, 0.15, True, 5)
    for claim in claims[::5]:
        assert [(n.node.node_id, n.score) for n in r.retrieve(claim.text)] == [
            (n.node.node_id, n.score) for n in back.retrieve(claim.text)
        ]


@pytest.mark.parametrize(
    "kwargs, match",
    [({"soi_top_m": 0}, "soi_top_m"), ({"rerank_candidates": 0}, "rerank_candidates"),
     ({"soi_claims": -1}, "soi_claims"), ({"hub_penalty": 2.0}, "hub_penalty")],
)
def test_option_validation(corpus, kwargs, match):
    evidence, claims, emb = corpus
    with pytest.raises(ValueError, match=match):
        ContextAwareRetriever.from_index(faiss_index(evidence, emb), claim_nodes=claims, n_clusters=3, **kwargs)
