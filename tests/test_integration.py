"""End to end with the packaged MiniLM encoder: demo corpus and FactVer."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import QueryBundle

from llama_index_carag import ContextAwareRetriever
from tests.helpers import StubLLM

pytestmark = pytest.mark.integration
KEYS = {
    "mode",
    "alpha",
    "delta",
    "cluster",
    "claim_similarity",
    "thematic_similarity",
    "in_soi",
    "soi_size",
    "fallback",
}


def ids_scores(nodes):
    return [(n.node.node_id, n.score) for n in nodes]


@pytest.mark.parametrize("mode", ["unsupervised", "supervised"])
def test_demo_corpus_both_modes(demo_index, demo_corpus, mode):
    r = ContextAwareRetriever.from_index(
        demo_index, "paper", mode=mode, claim_nodes=demo_corpus.claim_nodes, n_clusters=3, delta=0.4
    )
    evidence_ids = {n.node_id for n in demo_corpus.evidence_nodes}
    for claim in demo_corpus.claim_nodes[::4]:
        got = r.retrieve(claim.text)
        assert len(got) == 6 and {n.node.node_id for n in got} <= evidence_ids
        for n in got:
            assert set(n.node.metadata["carag"]) >= KEYS
        assert got[0].node.metadata["carag"]["claim_id"] == claim.node_id


def test_demo_persist_with_index_and_reload_offline(demo_corpus, minilm, tmp_path):
    r = ContextAwareRetriever.from_defaults(
        demo_corpus.evidence_nodes,
        settings="paper",
        claim_nodes=demo_corpus.claim_nodes,
        embed_model=minilm,
        n_clusters=3,
        delta=0.4,
    )
    r.persist(tmp_path, persist_index=True)
    back = ContextAwareRetriever.from_persist_dir(tmp_path)  # index and model resolved from disk
    for claim in demo_corpus.claim_nodes[:5]:
        assert ids_scores(r.retrieve(claim.text)) == ids_scores(back.retrieve(claim.text))


@pytest.fixture(scope="module")
def factver_retrievers(factver_index, factver_claims):
    return {
        mode: ContextAwareRetriever.from_index(factver_index, "paper", mode=mode, claim_nodes=factver_claims)
        for mode in ("unsupervised", "supervised")
    }


def test_factver_both_modes_return_k_evidence(factver_retrievers, factver_claims, factver_corpus):
    evidence_ids = {n.node_id for n in factver_corpus.evidence_nodes}
    for mode, r in factver_retrievers.items():
        for claim in factver_claims[::60]:
            got = r.retrieve(QueryBundle(claim.text, embedding=claim.embedding))
            assert len(got) == 6
            assert {n.node.node_id for n in got} <= evidence_ids
            for n in got:
                info = n.node.metadata["carag"]
                assert set(info) >= KEYS and info["mode"] == mode
                assert info["alpha"] == 0.5 and info["delta"] == 0.75


def test_factver_alpha_one_equals_plain(factver_index, factver_claims, factver_retrievers):
    plain = factver_index.as_retriever(similarity_top_k=6)
    r = factver_retrievers["unsupervised"].with_settings(alpha=1.0)
    for claim in factver_claims[::25]:
        assert ids_scores(plain.retrieve(claim.text)) == ids_scores(r.retrieve(claim.text))


def test_factver_async_equals_sync(factver_retrievers, factver_claims):
    r = factver_retrievers["supervised"]
    claims = factver_claims[::40]

    async def run():
        return await asyncio.gather(*(r.aretrieve(c.text) for c in claims))

    for claim, got in zip(claims, asyncio.run(run())):
        assert ids_scores(got) == ids_scores(r.retrieve(claim.text))


def test_factver_persistence_round_trip(factver_retrievers, factver_index, factver_claims, tmp_path):
    r = factver_retrievers["unsupervised"]
    r.persist(tmp_path)
    back = ContextAwareRetriever.from_persist_dir(tmp_path, index=factver_index)
    for claim in factver_claims[::50]:
        q = QueryBundle(claim.text, embedding=claim.embedding)
        assert ids_scores(r.retrieve(q)) == ids_scores(back.retrieve(q))


def test_retriever_in_query_engine_and_chat_engine(factver_retrievers, factver_claims):
    r = factver_retrievers["unsupervised"]
    llm = StubLLM()
    engine = RetrieverQueryEngine.from_args(retriever=r, llm=llm)
    claim = factver_claims[3].text
    response = engine.query(claim)
    assert str(response) == llm.answer
    assert len(response.source_nodes) == 6
    assert all("carag" in n.node.metadata for n in response.source_nodes)

    chat = CondensePlusContextChatEngine.from_defaults(retriever=r, settings="paper", llm=llm)
    reply = chat.chat(claim)
    assert str(reply) == llm.answer
    assert len(reply.source_nodes) == 6 and all("carag" in n.node.metadata for n in reply.source_nodes)
