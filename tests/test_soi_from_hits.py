"""A re-ranking query's dense search runs before its SOI, and the SOI is read from the search's hits when they
prove that no other member of the cluster could enter it: the same SOIs and results as a scan of the cluster,
which still runs whenever the hits cannot prove it."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import QueryBundle
from llama_index.vector_stores.faiss import FaissVectorStore

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.core.row_clusters import RowClusterStore
from llama_index_carag.core.store_rows import StoreHits
from llama_index_carag.ranking.sources import SearchRequest
from llama_index_carag.stores.faiss_rows import FaissRows
from tests.helpers import faiss_index, planted_corpus, unit

OPTIONS = dict(n_clusters=3, rerank_candidates=10, lexical_weight=0.6, claim_contrast=0.3, soi_min_size=3)


@pytest.fixture
def corpus(rng):
    return planted_corpus(rng, evidence_per_claim=8)


def _queries(corpus) -> list[str]:
    evidence, claims, _ = corpus
    return [c.text for c in claims[::3]] + [e.text for e in evidence[::11]]


def _answers(r: ContextAwareRetriever, queries: list[str]) -> list:
    out = []
    for q in queries:
        soi, hits = r.retrieve_with_soi(QueryBundle(q))
        out.append(
            (
                [(i.id, round(i.similarity, 6)) for i in soi.items()],
                soi.cluster_size,
                [(h.node.node_id, round(h.score, 6)) for h in hits],
            )
        )
    return out


def _counting_scans(monkeypatch) -> list[int]:
    """Count the cluster scans (``FaissRows.inner_products`` calls)."""
    calls = [0]
    scan = FaissRows.inner_products

    def counted(self, rows, query):
        calls[0] += 1
        return scan(self, rows, query)

    monkeypatch.setattr(FaissRows, "inner_products", counted)
    return calls


@pytest.mark.parametrize("id_map", [False, True])
def test_the_soi_read_from_the_hits_is_the_scanned_one(corpus, monkeypatch, id_map):
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(faiss_index(evidence, emb, id_map=id_map), claim_nodes=claims, **OPTIONS)
    assert isinstance(r.corpus.context.cluster_store_, RowClusterStore)
    queries = _queries(corpus)
    with monkeypatch.context() as m:
        m.setattr(RowClusterStore, "_hit_members", staticmethod(lambda *a, **k: None))
        scanned = _answers(r, queries)
    scans = _counting_scans(monkeypatch)
    assert _answers(r, queries) == scanned
    assert scans[0] < len(queries) // 2  # most SOIs came from the hits


def test_members_from_hits_equal_the_scan_or_are_refused(corpus, rng):
    """Over thresholds, fill sizes and search depths: the members read from the hits are the scan's, and the
    hits are refused (the scan runs) when they cannot prove it; both happen."""
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(faiss_index(evidence, emb, id_map=True), claim_nodes=claims, **OPTIONS)
    context, dense = r.corpus.context, r._sources[0]
    store = context.cluster_store_
    used = refused = 0
    for k in range(12):
        base = np.asarray(evidence[(7 * k) % len(evidence)].embedding)
        q = (2.0 * unit(base + 0.6 * rng.normal(size=len(base)))).astype(np.float32)  # not a unit vector
        q_unit = q / np.linalg.norm(q)
        key = context.locate(q_unit, None, unit=True)
        for limit in (3, 12, 60):
            _, hits = dense.search_hits(SearchRequest("q", q.tolist()), limit)
            assert hits is not None and hits.limit == limit
            for delta in (0.1, 0.5, 0.75, 0.9):
                for min_size in (0, 3, 10):
                    scan = store.query_members(key, q_unit, delta, None, None, min_size=min_size)
                    read = store.query_members(key, q_unit, delta, None, None, min_size=min_size, nearest=hits)
                    assert list(read.ids) == list(scan.ids)
                    np.testing.assert_array_equal(read.unit, scan.unit)
                    took = RowClusterStore._hit_members(store._current(), key, hits, delta, min_size)
                    used += took is not None
                    refused += took is None
    assert used and refused


def test_hits_bound_the_rows_they_do_not_hold():
    scores = np.asarray([0.9, 0.5, 0.2], dtype=np.float32)
    assert StoreHits(["a", "b", "c"], scores, 1.0, 3, None).bound == pytest.approx(0.2)
    assert StoreHits(["a", "b", "c"], scores, 1.0, 5, None).bound == float("-inf")  # fewer than asked: no other row
    assert StoreHits([], scores[:0], 1.0, 0, None).bound == float("inf")  # nothing asked: nothing known


def test_hits_of_another_store_are_not_read(corpus, monkeypatch):
    """Hits are read only when they are the answer of the store whose rows the clusters read (a retriever
    given another index's dense source as its first source scans)."""
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(faiss_index(evidence, emb), claim_nodes=claims, **OPTIONS)
    other = ContextAwareRetriever.from_index(faiss_index(evidence, emb), claim_nodes=claims, **OPTIONS)
    _, own = r._sources[0].search_hits(SearchRequest("q", list(evidence[0].embedding)), 10)
    _, foreign = other._sources[0].search_hits(SearchRequest("q", list(evidence[0].embedding)), 10)
    store = r.corpus.context.cluster_store_.store
    assert own is not None and foreign is not None
    assert store.bounds_rows(own) and not store.bounds_rows(foreign)


def test_an_l2_index_scans(corpus, monkeypatch):
    """FAISS's L2 search scores by distance, not inner product: its hits prove nothing, the SOI is scanned."""
    evidence, claims, emb = corpus
    dim = len(evidence[0].embedding)
    store = FaissVectorStore(faiss_index=faiss.IndexFlatL2(dim))
    index = VectorStoreIndex(
        [n.model_copy() for n in evidence],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=emb,
    )
    r = ContextAwareRetriever.from_index(index, claim_nodes=claims, **OPTIONS)
    assert isinstance(r.corpus.context.cluster_store_, RowClusterStore)
    _, hits = r._sources[0].search_hits(SearchRequest("q", list(evidence[0].embedding)), 5)
    assert hits is not None and not r.corpus.context.cluster_store_.store.bounds_rows(hits)
    scans = _counting_scans(monkeypatch)
    queries = _queries(corpus)
    for q in queries:
        r.retrieve(q)
    assert scans[0] == len(queries)
