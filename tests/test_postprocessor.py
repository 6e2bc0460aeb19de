"""ThematicContextPostprocessor: re-ranking as specified, against a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import QueryBundle

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.core.clustering import ThematicClusterer
from llama_index_carag.retrieval.postprocessor import ThematicContextPostprocessor
from tests.helpers import StubLLM, faiss_index, planted_corpus, unit


@pytest.fixture()
def setup(rng):
    evidence, claims, emb = planted_corpus(rng)
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3, delta=0.3)
    return index, r, evidence, claims, emb


def test_reranks_by_claim_and_thematic_similarity(setup):
    index, r, evidence, claims, emb = setup
    by_id = {e.node_id: e for e in evidence}
    pp = ThematicContextPostprocessor.from_retriever(r, alpha=0.3)
    plain = index.as_retriever(similarity_top_k=15)
    for claim in claims[::4]:
        nodes = plain.retrieve(claim.text)
        out = pp.postprocess_nodes(nodes, query_str=claim.text)
        t = unit(r.build_soi(claim.text).thematic_embedding)
        q = unit(claim.embedding)
        expect = {
            n.node.node_id: 0.3 * unit(by_id[n.node.node_id].embedding) @ q
            + 0.7 * unit(by_id[n.node.node_id].embedding) @ t
            for n in nodes
        }
        ranked = sorted(expect, key=lambda i: -expect[i])
        assert [n.node.node_id for n in out] == ranked
        np.testing.assert_allclose([n.score for n in out], [expect[i] for i in ranked], rtol=1e-5)
        for n in out:
            info = n.node.metadata["carag"]
            assert info["postprocessor"] is True and info["original_score"] is not None
            assert "carag" not in index.docstore.get_node(n.node.node_id).metadata


def test_alpha_one_keeps_claim_order_and_cutoff_drops(setup):
    index, r, evidence, claims, emb = setup
    nodes = index.as_retriever(similarity_top_k=20).retrieve(claims[0].text)
    out = ThematicContextPostprocessor.from_retriever(r, alpha=1.0).postprocess_nodes(nodes, query_str=claims[0].text)
    assert [n.node.node_id for n in out] == [n.node.node_id for n in nodes]
    cut = ThematicContextPostprocessor.from_retriever(r, thematic_cutoff=0.8, top_n=5)
    kept = cut.postprocess_nodes(nodes, query_str=claims[0].text)
    assert len(kept) <= 5
    assert all(n.node.metadata["carag"]["thematic_similarity"] >= 0.8 for n in kept)


def test_from_clusterer_builds_soi_from_candidates(setup):
    index, r, evidence, claims, emb = setup
    vecs = np.array([unit(e.embedding) for e in evidence], dtype=np.float32)
    clusterer = ThematicClusterer(n_clusters=3, random_state=0).fit(vecs)
    pp = ThematicContextPostprocessor.from_clusterer(clusterer, emb, delta=0.3, alpha=0.5)
    claim = claims[6]
    nodes = index.as_retriever(similarity_top_k=12).retrieve(claim.text)  # docstore nodes: no embeddings
    out = pp.postprocess_nodes(nodes, query_bundle=QueryBundle(claim.text))
    q = unit(claim.embedding)
    cq = clusterer.predict(q[None, :].astype(np.float32))[0]
    cand = {n.node.node_id: unit(next(e.embedding for e in evidence if e.node_id == n.node.node_id)) for n in nodes}
    soi = [i for i, v in cand.items() if clusterer.predict(v[None, :].astype(np.float32))[0] == cq and v @ q > 0.3]
    assert {n.node.node_id for n in out if n.node.metadata["carag"]["in_soi"]} == set(soi)
    assert len(out) == 12


def test_postprocessor_in_a_query_engine(setup):
    index, r, evidence, claims, emb = setup
    pp = ThematicContextPostprocessor.from_retriever(r, top_n=4)
    engine = index.as_query_engine(llm=StubLLM(), similarity_top_k=10, node_postprocessors=[pp])
    response = engine.query(claims[2].text)
    assert len(response.source_nodes) == 4
    assert all(n.node.metadata["carag"]["postprocessor"] for n in response.source_nodes)
    assert ThematicContextPostprocessor.class_name() == "ThematicContextPostprocessor"


@pytest.mark.parametrize(
    "kwargs, match", [({"alpha": 2.0}, "alpha"), ({"delta": -3}, "delta"), ({"top_n": 0}, "top_n")]
)
def test_bad_settings(setup, kwargs, match):
    index, r, *_ = setup
    with pytest.raises(ValueError, match=match):
        ThematicContextPostprocessor.from_retriever(r, **kwargs)


def test_needs_exactly_one_source_and_fitted(setup):
    with pytest.raises(ValueError, match="exactly one"):
        ThematicContextPostprocessor()
    with pytest.raises(ValueError, match="not fitted"):
        ThematicContextPostprocessor(clusterer=ThematicClusterer())


def test_postprocessor_gets_every_retriever_option(rng):
    """Same stage, same scores: the postprocessor over the retriever's own candidates returns the retriever's top-k,
    penalties included."""
    evidence, claims, emb = planted_corpus(rng)
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(
        index,
        "paper",
        claim_nodes=claims,
        n_clusters=3,
        delta=0.3,
        alpha=0.7,
        rerank_candidates=10,
        soi_claims=1,
        hub_penalty=0.2,
        claim_contrast=0.3,
        contrast_threshold=0.8,
    )
    pp = ThematicContextPostprocessor.from_retriever(r, top_n=r.similarity_top_k)
    assert pp.settings == r.settings
    plain = index.as_retriever(similarity_top_k=10)
    for claim in claims[::3]:
        got = r.retrieve(claim.text)
        post = pp.postprocess_nodes(plain.retrieve(claim.text), query_str=claim.text)
        assert [n.node.node_id for n in post] == [n.node.node_id for n in got]
        np.testing.assert_allclose([n.score for n in post], [n.score for n in got], atol=1e-6)
        assert set(post[0].node.metadata["carag"]["terms"]) >= {"dense", "hubness", "claim_contrast"}


def test_postprocessor_options_are_settings(setup):
    index, r, evidence, claims, emb = setup
    pp = ThematicContextPostprocessor.from_retriever(r, alpha=0.3, soi_top_m=2)
    assert pp.alpha == 0.3 and pp.settings.soi_top_m == 2 and pp.delta == r.delta
    with pytest.raises(ValueError, match="alpha must be in"):
        ThematicContextPostprocessor.from_retriever(r, alpha=3)
    clusterer = ThematicClusterer(n_clusters=3).fit(np.array([e.embedding for e in evidence]))
    with pytest.raises(ValueError, match="need fitted tables"):
        ThematicContextPostprocessor.from_clusterer(
            clusterer, emb, rerank_candidates=5, hub_penalty=0.1
        ).postprocess_nodes(index.as_retriever(similarity_top_k=5).retrieve(claims[0].text), query_str=claims[0].text)
