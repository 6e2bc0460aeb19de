"""BM25 candidates and the lexical term in ContextAwareRetriever (the hybrid pool)."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.ranking.bm25 import BM25Index, scaled_lexical
from llama_index_carag.retrieval.indexing import build_faiss_index
from llama_index_carag.settings import PAPER

HYBRID = PAPER.replace(alpha=1.0, rerank_candidates=30, lexical_weight=0.8)


@pytest.fixture(scope="module")
def hybrid(demo_index, demo_corpus):
    return ContextAwareRetriever.from_index(demo_index, HYBRID, claim_nodes=demo_corpus.claim_nodes)


def test_scaled_lexical_by_hand():
    out = scaled_lexical(np.array([0.0, 5.0, 10.0]), np.array([0.2, 0.5, 0.6]))
    assert np.allclose(out, [0.0, 0.2, 0.4])
    assert not scaled_lexical(np.array([3.0, 3.0]), np.array([0.1, 0.9])).any()
    assert scaled_lexical(np.zeros(0), np.zeros(0)).shape == (0,)


def test_needs_a_pool():
    with pytest.raises(ValueError, match="lexical_weight needs rerank_candidates"):
        PAPER.replace(lexical_weight=0.5)
    with pytest.raises(ValueError, match=r"in \[0, 10\]"):
        PAPER.replace(rerank_candidates=10, lexical_weight=-1)
    with pytest.raises(TypeError):
        PAPER.replace(rerank_candidates=10, lexical_weight="much")


def test_lexical_only_matches_appear_with_provenance(hybrid, demo_index, demo_corpus):
    assert isinstance(hybrid.corpus.tables["lexical"].index, BM25Index)
    claim = demo_corpus.claim_nodes[0].get_content()
    hits = hybrid.retrieve(claim)
    assert len(hits) == HYBRID.similarity_top_k
    info = hits[0].node.metadata["carag"]
    assert info["reranked"] is True
    assert set(info["terms"]) >= {"dense", "lexical"}
    assert info["lexical_score"] >= 0 and (info["lexical_rank"] is None or info["lexical_rank"] >= 1)
    # the final score is the sum of the weighted terms
    for hit in hits:
        terms = hit.node.metadata["carag"]["terms"]
        assert hit.score == pytest.approx(terms["dense"] + HYBRID.lexical_weight * terms["lexical"], abs=1e-6)


def test_weight_zero_is_the_plain_reranker(demo_index, demo_corpus, hybrid):
    off = hybrid.with_settings(lexical_weight=0.0, alpha=1.0, rerank_candidates=None)
    plain = demo_index.as_retriever(similarity_top_k=6)
    claim = demo_corpus.claim_nodes[3].get_content()
    assert [h.node.node_id for h in off.retrieve(claim)] == [h.node.node_id for h in plain.retrieve(claim)]


def test_query_with_no_known_term(hybrid):
    hits = hybrid.retrieve("zzqv qqxz")
    assert len(hits) == 6
    assert all(h.node.metadata["carag"]["lexical_score"] == 0.0 for h in hits)


def test_async_matches_sync(hybrid, demo_corpus):
    import asyncio

    claim = demo_corpus.claim_nodes[5].get_content()
    sync = [(h.node.node_id, h.score) for h in hybrid.retrieve(claim)]
    got = [(h.node.node_id, h.score) for h in asyncio.run(hybrid.aretrieve(QueryBundle(claim)))]
    assert got == sync


def test_persist_round_trip_keeps_bm25(tmp_path, hybrid, demo_corpus):
    import json

    hybrid.persist(tmp_path, persist_index=True)
    manifest = json.loads((tmp_path / "carag" / "carag_manifest.json").read_text())
    assert "lexical" in [t["key"] for t in manifest["info"]["tables"]]  # inside the atomic state
    assert not (tmp_path / "carag" / "lexical").exists()  # no side folder written before the manifest
    again = ContextAwareRetriever.from_persist_dir(tmp_path)
    assert again.settings == hybrid.settings
    assert again.corpus.tables["lexical"].index.ids_ == hybrid.corpus.tables["lexical"].index.ids_
    claim = demo_corpus.claim_nodes[7].get_content()
    assert [(h.node.node_id, round(h.score, 6)) for h in again.retrieve(claim)] == [
        (h.node.node_id, round(h.score, 6)) for h in hybrid.retrieve(claim)
    ]


def test_inserted_passages_are_found_lexically(minilm, demo_corpus):
    index = build_faiss_index(demo_corpus.evidence_nodes, minilm, id_map=True)
    retriever = ContextAwareRetriever.from_index(index, HYBRID, claim_nodes=demo_corpus.claim_nodes)
    new = TextNode(id_="fresh-1", text="Quokkaflux zebrabanana levels rose sharply in 2031.")
    retriever.insert_nodes([new])
    assert "fresh-1" in retriever.corpus.tables["lexical"].index.ids_
    hits = retriever.retrieve("quokkaflux zebrabanana")
    assert hits[0].node.node_id == "fresh-1"
    assert hits[0].node.metadata["carag"]["lexical_rank"] == 1
    retriever.delete_nodes(["fresh-1"])
    assert "fresh-1" not in retriever.corpus.tables["lexical"].index.ids_


def test_package_default_is_the_default_preset(demo_index, demo_corpus):
    from llama_index_carag.settings import DEFAULT, PRESETS

    assert PRESETS["default"] is DEFAULT and DEFAULT.lexical_weight > 0 and DEFAULT.claim_contrast > 0
    with_claims = ContextAwareRetriever.from_index(demo_index, claim_nodes=demo_corpus.claim_nodes)
    assert with_claims.settings == DEFAULT
    without = ContextAwareRetriever.from_index(demo_index)  # no claims: contrast cannot apply, the rest stays
    assert without.settings == DEFAULT.replace(claim_contrast=0.0)
    assert len(without.retrieve(demo_corpus.claim_nodes[0].get_content())) == DEFAULT.similarity_top_k
    paper = ContextAwareRetriever.from_index(demo_index, "paper", claim_nodes=demo_corpus.claim_nodes)
    assert paper.settings.lexical_weight == 0 and paper.settings.rerank_candidates is None
    with pytest.raises(ValueError, match="claim_contrast needs"):  # asked for explicitly: a clear error
        ContextAwareRetriever.from_index(demo_index, DEFAULT)


def test_same_hybrid_results_on_faiss_simple_and_qdrant(rng):
    """BM25 in process over the docstore (FAISS, simple store) or in Qdrant's sparse vector: the results agree."""
    pytest.importorskip("qdrant_client")
    from tests.helpers import faiss_index, planted_corpus, simple_index
    from tests.test_qdrant import qdrant_index, with_uuid_ids

    evidence, claims, emb = planted_corpus(rng, claims_per_theme=5)
    evidence = with_uuid_ids(evidence)
    settings = PAPER.replace(n_clusters=3, alpha=0.8, rerank_candidates=10, lexical_weight=0.6, claim_contrast=0.3)
    built = [
        ContextAwareRetriever.from_index(make(evidence, emb), settings, claim_nodes=claims)
        for make in (faiss_index, simple_index, qdrant_index)
    ]
    assert all(len(b.corpus.tables["lexical"]) == len(evidence) for b in built)
    for claim in claims:
        runs = [[(h.node.node_id, round(h.score, 5)) for h in b.retrieve(claim.text)] for b in built]
        assert runs[0] == runs[1] == runs[2]
