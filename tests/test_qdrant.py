"""CARAG on Qdrant (embedded local mode): same results as FAISS, clusters in payloads, SOIs on the server."""

from __future__ import annotations

import numpy as np
import pytest

qdrant_client = pytest.importorskip("qdrant_client")
pytest.importorskip("llama_index.vector_stores.qdrant")

from llama_index.core import StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.vector_stores.qdrant import QdrantVectorStore  # noqa: E402

from llama_index_carag import ContextAwareRetriever  # noqa: E402
from llama_index_carag.datasets import uuid_node_id  # noqa: E402
from llama_index_carag.stores.qdrant_clusters import CLUSTER_PAYLOAD_KEY, QdrantClusterStore  # noqa: E402
from tests.helpers import faiss_index, planted_corpus  # noqa: E402


def with_uuid_ids(evidence):
    return [e.model_copy(update={"id_": uuid_node_id(e.node_id)}) for e in evidence]


def qdrant_index(nodes, emb, path=None, name="carag"):
    client = qdrant_client.QdrantClient(path=str(path)) if path else qdrant_client.QdrantClient(":memory:")
    store = QdrantVectorStore(client=client, collection_name=name)
    return VectorStoreIndex(
        [n.model_copy() for n in nodes],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=emb,
    )


@pytest.fixture()
def corpus(rng):
    evidence, claims, emb = planted_corpus(rng, claims_per_theme=5)
    return with_uuid_ids(evidence), claims, emb


@pytest.mark.parametrize("mode", ["unsupervised", "supervised"])
@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"soi_top_m": 2},
        {"rerank_candidates": 10, "soi_claims": 1, "claim_contrast": 0.2, "contrast_threshold": 0.8},
    ],
    ids=["all", "top-2", "tuned-style"],
)
def test_same_clusters_sois_and_top_k_as_faiss(corpus, mode, extra):
    evidence, claims, emb = corpus
    kwargs = dict(mode=mode, claim_nodes=claims, n_clusters=3, delta=0.3, alpha=0.5, **extra)
    on_faiss = ContextAwareRetriever.from_index(faiss_index(evidence, emb), "paper", **kwargs)
    on_qdrant = ContextAwareRetriever.from_index(qdrant_index(evidence, emb), "paper", **kwargs)
    assert isinstance(on_qdrant.context.cluster_store_, QdrantClusterStore)
    ids = [e.node_id for e in evidence]
    assert on_faiss.context.clusters_of(ids) == on_qdrant.context.clusters_of(ids)
    for claim in claims:
        a, b = on_faiss.build_soi(claim.text), on_qdrant.build_soi(claim.text)
        assert a.to_dict()["similarities"].keys() == b.to_dict()["similarities"].keys()
        assert a.cluster_size == b.cluster_size and {i.text for i in a.items()} == {i.text for i in b.items()}
        got_f, got_q = on_faiss.retrieve(claim.text), on_qdrant.retrieve(claim.text)
        assert [n.node.node_id for n in got_f] == [n.node.node_id for n in got_q]
        np.testing.assert_allclose([n.score for n in got_f], [n.score for n in got_q], atol=1e-5)
        assert [n.node.metadata["carag"]["cluster"] for n in got_f] == [
            n.node.metadata["carag"]["cluster"] for n in got_q
        ]


def test_client_fetches_only_the_fit_sample(corpus, monkeypatch):
    evidence, claims, emb = corpus
    index = qdrant_index(evidence, emb)
    client = index.vector_store.client
    fetched = []
    real = client.retrieve

    def spy(collection, ids, **kw):
        if kw.get("with_vectors"):
            fetched.extend(ids)
        return real(collection, ids=ids, **kw)

    monkeypatch.setattr(client, "retrieve", spy)
    r = ContextAwareRetriever.from_index(index, "paper", n_clusters=3, clusterer_params={"max_fit_samples": 20})
    assert len(fetched) <= 21  # the sample (plus one dimension probe), not the 100-point corpus
    point = client.retrieve(index.vector_store.collection_name, ids=[evidence[0].node_id], with_payload=True)[0]
    assert point.payload[CLUSTER_PAYLOAD_KEY] == r.context.cluster_of(evidence[0].node_id)


def test_persist_reload_and_insert(corpus, tmp_path):
    evidence, claims, emb = corpus
    index = qdrant_index(evidence[:-5], emb)
    r = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3, delta=0.3)
    r.persist(tmp_path / "state")
    back = ContextAwareRetriever.from_persist_dir(tmp_path / "state", index=index)
    for claim in claims[::4]:
        assert [n.node.node_id for n in r.retrieve(claim.text)] == [n.node.node_id for n in back.retrieve(claim.text)]
    new = [e.model_copy(update={"embedding": None}) for e in evidence[-5:]]
    r.insert_nodes(new)
    clusterer = r.context.clusterers_[None]
    for e in evidence[-5:]:
        v = np.asarray(e.embedding, dtype=np.float32)
        assert r.context.cluster_of(e.node_id) == int(clusterer.predict((v / np.linalg.norm(v))[None, :])[0])
    assert sum(r.context.group_size(k) for k in r.context.groups) == len(evidence) + len(claims)


def test_hub_penalty_is_refused_on_qdrant(corpus):
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(qdrant_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3)
    with pytest.raises(ValueError, match="not available on a Qdrant collection"):
        r.with_settings(rerank_candidates=10, hub_penalty=0.1)


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["unsupervised", "supervised"])
def test_factver_qdrant_equals_faiss(factver_index, factver_claims, minilm, mode):
    """FactVer (MiniLM): the same top-k ids from FAISS and from Qdrant, same settings."""
    from llama_index.core.schema import QueryBundle

    from llama_index_carag.stores.vector_stores import get_node_embeddings

    ids, vectors = get_node_embeddings(factver_index)
    nodes = [
        n.model_copy(update={"id_": uuid_node_id(n.node_id), "embedding": v.tolist()})
        for n, v in zip(factver_index.docstore.get_nodes(ids), vectors)
    ]
    kwargs = dict(mode=mode, claim_nodes=factver_claims)  # the papers' settings: alpha .5, delta .75, t 10, k 6
    on_faiss = ContextAwareRetriever.from_index(faiss_index(nodes, minilm), "paper", **kwargs)
    on_qdrant = ContextAwareRetriever.from_index(qdrant_index(nodes, minilm), "paper", **kwargs)
    for claim in factver_claims[::7]:
        q = QueryBundle(claim.text, embedding=claim.embedding)
        assert_same_ranking(on_faiss.retrieve(q), on_qdrant.retrieve(q))


def assert_same_ranking(a, b, tol=1e-5):
    """Same ids in the same order, except that exactly tied passages (FactVer repeats many
    passages under several ids; each store orders equal scores its own way) may swap, and a
    tie group cut by k may differ in which copies made it."""
    sa, sb = [n.score for n in a], [n.score for n in b]
    np.testing.assert_allclose(sa, sb, atol=tol)
    groups: list[list[int]] = []
    for i, score in enumerate(sa):
        if groups and abs(score - sa[groups[-1][0]]) <= tol:
            groups[-1].append(i)
        else:
            groups.append([i])
    for g in groups[:-1]:
        assert {a[i].node.node_id for i in g} == {b[i].node.node_id for i in g}
    ta = {a[i].node.get_content() for i in groups[-1]}
    tb = {b[i].node.get_content() for i in groups[-1]}
    assert ta == tb  # the last (possibly cut) tie group holds the same passage text


def test_claims_stored_in_the_collection_are_never_evidence(rng):
    evidence, claims, emb = planted_corpus(rng)
    evidence = with_uuid_ids(evidence)
    claims = [c.model_copy(update={"id_": uuid_node_id(c.node_id)}) for c in claims]
    index = qdrant_index(evidence + claims, emb)
    r = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3, delta=0.0)
    claim_ids = {c.node_id for c in claims}
    for claim in claims[::3]:
        assert not claim_ids & {n.node.node_id for n in r.retrieve(claim.text)}
        soi = r.build_soi(claim.text)
        assert not claim_ids & {i.id for i in soi.refined_cluster_evidences}


def test_async_retrieve_without_an_async_client(corpus):
    import asyncio

    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(qdrant_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3)
    got = asyncio.run(r.aretrieve(claims[0].text))
    assert [n.node.node_id for n in got] == [n.node.node_id for n in r.retrieve(claims[0].text)]


def test_a_deleted_claim_leaves_the_qdrant_sois_as_it_leaves_faiss(rng):
    """A claim delete marks its row dead in the claims kept in memory: no SOI keeps or counts it."""
    evidence, claims, emb = planted_corpus(rng, claims_per_theme=12)
    evidence = with_uuid_ids(evidence)
    kwargs = dict(mode="supervised", claim_nodes=claims, n_clusters=2, delta=0.3, alpha=0.5)
    on_faiss = ContextAwareRetriever.from_index(faiss_index(evidence, emb), "paper", **kwargs)
    on_qdrant = ContextAwareRetriever.from_index(qdrant_index(evidence, emb), "paper", **kwargs)
    in_memory = on_qdrant.context.cluster_store_.claims.clusters
    key, group = max(in_memory.groups.items(), key=lambda kv: len(kv[1]))
    assert len(group) >= 4  # one delete of four or more marks a row dead (no compaction)
    gone = next(i for i, c in zip(group.ids, group.is_claim) if c)
    for retriever in (on_faiss, on_qdrant):
        retriever.context.remove_items([gone])
    assert in_memory is not on_qdrant.context.cluster_store_.claims.clusters
    assert on_qdrant.context.cluster_store_.claims.clusters.groups[key].live is not None
    for claim in claims:
        if claim.node_id == gone:
            continue
        a, b = on_faiss.build_soi(claim.text), on_qdrant.build_soi(claim.text)
        assert gone not in b.to_dict()["similarities"]
        assert a.to_dict()["similarities"].keys() == b.to_dict()["similarities"].keys()
        assert a.cluster_size == b.cluster_size
