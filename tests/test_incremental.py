"""Inserting and deleting nodes after fitting: no refit, no node lost or duplicated."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.stores.faiss_store import SafeFaissMapVectorStore
from tests.helpers import faiss_index, planted_corpus, unit


@pytest.fixture()
def setup(rng):
    evidence, claims, emb = planted_corpus(rng)
    index = faiss_index(evidence[:-10], emb, id_map=True)  # hold 10 passages back for insertion
    r = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3, delta=0.2)
    return r, index, evidence, claims, emb


def evidence_ids(r):
    claims = set(r.corpus.claim_ids)
    return sorted(i for i, _ in r.context.iter_items() if i not in claims)


def test_insert_assigns_clusters_by_predict_and_joins_sois(setup):
    r, index, evidence, claims, emb = setup
    clusterer = r.context.clusterers_[None]
    before = {k: r.context.group_size(k) for k in r.context.groups}
    new = [e.model_copy(update={"embedding": None}) for e in evidence[-10:]]
    r.insert_nodes(new)
    for e in evidence[-10:]:
        expected = int(clusterer.predict(unit(e.embedding)[None, :].astype(np.float32))[0])
        assert r.context.cluster_of(e.node_id) == expected
    assert sum(r.context.group_size(k) for k in r.context.groups) == sum(before.values()) + 10
    assert evidence_ids(r) == sorted(e.node_id for e in evidence)
    # brute-force SOI over the grown clusters
    for claim in claims:
        q = unit(claim.embedding)
        c = r.context.cluster_of(claim.node_id)
        expect = {e.node_id for e in evidence if r.context.cluster_of(e.node_id) == c and unit(e.embedding) @ q > 0.2}
        assert set(r.build_soi(claim.text).item_ids) == expect


def test_delete_removes_from_every_soi_and_results(setup):
    r, index, evidence, claims, emb = setup
    gone = [n.node.node_id for n in r.retrieve(claims[0].text)[:3]]
    r.delete_nodes(gone)
    assert not set(gone) & set(evidence_ids(r))
    for claim in claims:
        assert not set(gone) & set(r.build_soi(claim.text).item_ids)
        assert not set(gone) & {n.node.node_id for n in r.retrieve(claim.text)}
    assert len(evidence_ids(r)) == len(evidence) - 10 - 3


def test_reinsert_replaces_never_duplicates(setup):
    r, index, evidence, claims, emb = setup
    node = evidence[0]
    r.insert_nodes([node.model_copy(update={"embedding": None})])
    r.insert_nodes([node.model_copy(update={"embedding": None})])
    assert evidence_ids(r).count(node.node_id) == 1
    assert list(index.vector_store._node_id_to_faiss_id_map).count(node.node_id) == 1
    assert index.vector_store.client.ntotal == len(evidence) - 10
    hits = [n.node.node_id for n in r.retrieve(claims[0].text)]
    assert len(hits) == len(set(hits))


def test_direct_index_changes_are_synced_at_the_next_query(setup):
    r, index, evidence, claims, emb = setup
    index.insert_nodes([TextNode(id_=e.node_id, text=e.text) for e in evidence[-10:]])
    r.retrieve(claims[0].text)
    assert evidence_ids(r) == sorted(e.node_id for e in evidence)
    index.delete_nodes([evidence[0].node_id])
    r.retrieve(claims[0].text)
    assert evidence[0].node_id not in evidence_ids(r)
    assert r.sync() == (0, 0)


def test_refit_equals_a_fresh_fit(setup):
    r, index, evidence, claims, emb = setup
    r.insert_nodes([TextNode(id_=e.node_id, text=e.text) for e in evidence[-10:]])
    r.refit()
    fresh = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3, delta=0.2)
    for claim in claims[::3]:
        assert [(n.node.node_id, n.score) for n in r.retrieve(claim.text)] == [
            (n.node.node_id, n.score) for n in fresh.retrieve(claim.text)
        ]


def test_plain_faiss_store_cannot_delete(rng):
    evidence, claims, emb = planted_corpus(rng)
    r = ContextAwareRetriever.from_index(faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3)
    with pytest.raises(ValueError, match="cannot delete nodes"):
        r.delete_nodes([evidence[0].node_id])


def test_safe_map_store_ids_never_collide(rng):
    vecs = [unit(rng.normal(size=4)).astype(np.float32) for _ in range(8)]
    store = SafeFaissMapVectorStore(faiss_index=faiss.IndexIDMap2(faiss.IndexFlatIP(4)))
    store.add([TextNode(id_=f"n{i}", text="x", embedding=vecs[i].tolist()) for i in range(5)])
    store.delete_nodes(["n1", "n2"])
    store.add([TextNode(id_=f"n{i}", text="x", embedding=vecs[i].tolist()) for i in (5, 6)])
    faiss_ids = list(store._node_id_to_faiss_id_map.values())
    assert len(faiss_ids) == len(set(faiss_ids)) == 5
    for node_id, fid in store._node_id_to_faiss_id_map.items():
        np.testing.assert_allclose(store.client.reconstruct(int(fid)), vecs[int(node_id[1:])], rtol=1e-6)
