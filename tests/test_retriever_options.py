"""The retriever's optional variants, each against a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag import ContextAwareRetriever
from tests.helpers import TableEmbedding, faiss_index, planted_corpus, unit


@pytest.fixture()
def corpus(rng):
    return planted_corpus(rng)


def test_soi_top_m_keeps_the_most_similar(corpus):
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(
        faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3, delta=-1.0, soi_top_m=4
    )
    for claim in claims[:4]:
        soi = r.build_soi(claim.text)
        assert len(soi) == 4
        cluster = r.context.cluster_of(claim.node_id)
        q = unit(claim.embedding)
        pool = sorted(
            (float(unit(e.embedding) @ q), e.node_id) for e in evidence if r.context.cluster_of(e.node_id) == cluster
        )
        assert {i for _, i in pool[-4:]} == set(soi.item_ids)


def test_rerank_reorders_the_claim_neighbourhood(corpus):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(
        index, "paper", claim_nodes=claims, n_clusters=3, delta=0.3, alpha=0.6, rerank_candidates=10
    )
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
        index,
        "paper",
        claim_nodes=claims,
        n_clusters=3,
        delta=0.9,
        alpha=0.8,
        rerank_candidates=12,
        soi_claims=2,
        hub_penalty=0.2,
        hub_k=3,
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
        ContextAwareRetriever.from_index(
            faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3, hub_penalty=0.1
        )
    r = ContextAwareRetriever.from_index(faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3)
    with pytest.raises(ValueError, match="hub_penalty needs rerank_candidates"):
        r.with_settings(hub_penalty=0.1)  # one validator, whichever entry point
    assert "hubness" not in [s.name for s in r.stage.scorers]
    ranked = r.with_settings(rerank_candidates=10, hub_penalty=0.1)  # the table is fitted here, not per query
    assert "hubness" in [s.name for s in ranked.stage.scorers] and "hubness_20" in r.corpus.tables
    info = ranked.retrieve(claims[0].text)[0].node.metadata["carag"]
    assert set(info["terms"]) == {"dense", "thematic", "hubness"} or set(info["terms"]) == {"dense", "hubness"}


@pytest.mark.parametrize("tau", [0.8, 0.95, -1.0])
def test_claim_contrast_matches_brute_force(corpus, tau):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(
        index,
        "paper",
        claim_nodes=claims,
        n_clusters=3,
        delta=0.9,
        alpha=0.8,
        rerank_candidates=12,
        soi_claims=1,
        claim_contrast=0.3,
        contrast_threshold=tau,
    )
    E = {e.node_id: unit(e.embedding) for e in evidence}
    C = np.array([unit(c.embedding) for c in claims])
    for claim in claims[::3]:
        q = unit(claim.embedding)
        others = C[C @ q <= tau]  # the query claim itself (cosine 1) is never its own competitor
        soi = r.build_soi(claim.text)
        t = None if soi.thematic_embedding is None else unit(soi.thematic_embedding)
        pool = [n.node.node_id for n in index.as_retriever(similarity_top_k=12).retrieve(claim.text)]

        def score(i, q=q, t=t, others=others):
            base = E[i] @ q if t is None else 0.8 * E[i] @ q + 0.2 * E[i] @ t
            return base - 0.3 * (float((others @ E[i]).max()) if len(others) else 0.0)

        expect = sorted(pool, key=lambda i: -score(i))[:6]
        got = r.retrieve(claim.text)
        assert [n.node.node_id for n in got] == expect
        np.testing.assert_allclose([n.score for n in got], [score(i) for i in expect], rtol=1e-5, atol=1e-6)


def test_claim_contrast_promotes_the_claims_own_evidence(rng):
    # Two claims with their evidence; the query is claim A.  Passage x is a little closer to A
    # than A's own passage a, but much closer to claim B: contrast puts a first.
    base = np.eye(4)
    vec = {
        "claim A": base[0],
        "claim B": unit(base[0] + 1.2 * base[1]),
        "evidence a": unit(base[0] + 0.55 * base[2]),
        "evidence x": unit(base[0] + 0.5 * base[1]),
        "evidence b": unit(base[0] + 2.0 * base[1]),
        "evidence far": base[3],
    }
    emb = TableEmbedding({k: list(v) for k, v in vec.items()})
    evidence = [TextNode(id_=t, text=t, embedding=list(vec[t])) for t in vec if t.startswith("evidence")]
    claims = [TextNode(id_=t, text=t, embedding=list(vec[t])) for t in ("claim A", "claim B")]
    index = faiss_index(evidence, emb)
    plain = [n.node.node_id for n in index.as_retriever(similarity_top_k=2).retrieve("claim A")]
    assert plain == ["evidence x", "evidence a"]
    r = ContextAwareRetriever.from_index(
        index,
        "paper",
        claim_nodes=claims,
        n_clusters=1,
        alpha=1.0,
        similarity_top_k=2,
        rerank_candidates=4,
        claim_contrast=0.5,
    )
    assert [n.node.node_id for n in r.retrieve("claim A")] == ["evidence a", "evidence x"]
    assert [n.node.node_id for n in r.with_settings(claim_contrast=0.0).retrieve("claim A")] == plain  # plain RAG again


def test_claim_contrast_needs_claims_and_rerank(corpus):
    evidence, claims, emb = corpus
    with pytest.raises(ValueError, match="claim_contrast needs rerank_candidates"):
        ContextAwareRetriever.from_index(
            faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3, claim_contrast=0.1
        )
    with pytest.raises(ValueError, match="claim_contrast needs the corpus's claims"):
        ContextAwareRetriever.from_index(
            faiss_index(evidence, emb), "paper", n_clusters=3, rerank_candidates=10, claim_contrast=0.1
        )
    r = ContextAwareRetriever.from_index(faiss_index(evidence, emb), "paper", n_clusters=3)
    with pytest.raises(ValueError, match="claim_contrast needs the corpus's claims"):
        r.with_settings(rerank_candidates=10, claim_contrast=0.1)
    r = ContextAwareRetriever.from_index(faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3)
    with pytest.raises(ValueError, match="claim_contrast needs rerank_candidates"):
        r.with_settings(claim_contrast=0.1)


def test_dedupe_returns_distinct_texts(rng):
    base = [unit(rng.normal(size=8)) for _ in range(6)]
    nodes, table = [], {}
    for i, v in enumerate(base):
        for copy in range(3):  # every text three times under different ids
            nodes.append(TextNode(id_=f"e{i}_{copy}", text=f"passage {i}", embedding=v.tolist()))
        table[f"passage {i}"] = v
    table["q"] = base[0]
    emb = TableEmbedding({k: v.tolist() for k, v in table.items()})
    r = ContextAwareRetriever.from_index(
        faiss_index(nodes, emb), "paper", n_clusters=2, similarity_top_k=4, dedupe=True
    )
    got = r.retrieve("q")
    texts = [n.node.text for n in got]
    assert len(got) == 4 and len(set(texts)) == 4 and texts[0] == "passage 0"
    assert len({n.node.text for n in r.with_settings(dedupe=False).retrieve("q")}) < 4


def test_options_survive_persistence(corpus, tmp_path):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(
        index,
        "paper",
        claim_nodes=claims,
        n_clusters=3,
        alpha=0.8,
        rerank_candidates=20,
        soi_claims=1,
        hub_penalty=0.15,
        dedupe=True,
        soi_top_m=5,
        claim_contrast=0.2,
        contrast_threshold=0.7,
    )
    r.persist(tmp_path)
    back = ContextAwareRetriever.from_persist_dir(tmp_path, index=index)
    assert (back.rerank_candidates, back.soi_claims, back.hub_penalty, back.dedupe, back.soi_top_m) == (
        20,
        1,
        0.15,
        True,
        5,
    )
    assert (back.claim_contrast, back.contrast_threshold) == (0.2, 0.7)
    for claim in claims[::5]:
        assert [(n.node.node_id, n.score) for n in r.retrieve(claim.text)] == [
            (n.node.node_id, n.score) for n in back.retrieve(claim.text)
        ]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"soi_top_m": 0}, "soi_top_m"),
        ({"rerank_candidates": 0}, "rerank_candidates"),
        ({"soi_claims": -1}, "soi_claims"),
        ({"hub_penalty": 2.0}, "hub_penalty"),
        ({"rerank_candidates": 10, "claim_contrast": 1.5}, "claim_contrast"),
        ({"rerank_candidates": 10, "claim_contrast": 0.1, "contrast_threshold": 2.0}, "contrast_threshold"),
    ],
)
def test_option_validation(corpus, kwargs, match):
    evidence, claims, emb = corpus
    with pytest.raises(ValueError, match=match):
        ContextAwareRetriever.from_index(
            faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3, **kwargs
        )


def test_hubness_table_is_saved_and_reloaded_not_refitted(corpus, tmp_path, monkeypatch):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(
        index, "paper", claim_nodes=claims, n_clusters=3, alpha=0.8, rerank_candidates=12, hub_penalty=0.2, hub_k=3
    )
    r.persist(tmp_path)
    from llama_index_carag.ranking import hubness

    def refit(*args, **kwargs):  # a reload must read the saved table
        raise AssertionError("hubness was refitted on reload")

    monkeypatch.setattr(hubness.Hubness, "fit", refit)
    again = ContextAwareRetriever.from_persist_dir(tmp_path, index=index)
    assert again.corpus.tables["hubness_3"].table_ == pytest.approx(r.corpus.tables["hubness_3"].table_)
    for claim in claims[::5]:
        a, b = r.retrieve(claim.text), again.retrieve(claim.text)
        assert [n.node.node_id for n in a] == [n.node.node_id for n in b]
        np.testing.assert_allclose([n.score for n in a], [n.score for n in b], rtol=1e-6)
