"""Clusters that read the FAISS store's own rows (no copy of the corpus) give what clusters holding a copy give:
the same SOIs and results after a fit, inserts, deletes (also ones made on the index directly) and a reload."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.core.cluster_store import MemoryClusterStore
from llama_index_carag.core.row_clusters import RowClusterStore
from llama_index_carag.stores.faiss_adapter import FaissAdapter
from tests.helpers import faiss_index, planted_corpus, simple_index, unit

OPTIONS = dict(n_clusters=3, rerank_candidates=10, lexical_weight=0.6, claim_contrast=0.3, soi_min_size=3)


@pytest.fixture
def corpus(rng):
    return planted_corpus(rng, evidence_per_claim=8)


def _pair(corpus, monkeypatch, *, id_map: bool, mode: str = "unsupervised"):
    """The same retriever twice: clusters on the store's rows, and (store_rows off) on their own copy."""
    evidence, claims, emb = corpus
    settings = dict(OPTIONS, mode=mode)
    lent = ContextAwareRetriever.from_index(faiss_index(evidence, emb, id_map=id_map), claim_nodes=claims, **settings)
    with monkeypatch.context() as m:
        m.setattr(FaissAdapter, "store_rows", lambda self: None)
        copied = ContextAwareRetriever.from_index(
            faiss_index(evidence, emb, id_map=id_map), claim_nodes=claims, **settings
        )
    assert isinstance(lent.corpus.context.cluster_store_, RowClusterStore)
    assert isinstance(copied.corpus.context.cluster_store_, MemoryClusterStore)
    return lent, copied


def _answers(r: ContextAwareRetriever, queries: list[str]) -> list:
    out = []
    for q in queries:
        soi = r.build_soi(q)
        hits = r.retrieve(q)
        out.append(
            (
                sorted((i.id, round(i.similarity, 5)) for i in soi.items()),
                soi.cluster_size,
                [(h.node.node_id, round(h.score, 5)) for h in hits],
            )
        )
    return out


def _queries(corpus) -> list[str]:
    evidence, claims, _ = corpus
    return [c.text for c in claims[::3]] + [e.text for e in evidence[::17]]


def _new_nodes(rng, evidence, n):
    out = []
    for k in range(n):
        near = evidence[(5 * k) % len(evidence)]
        vec = unit(np.asarray(near.embedding) + 0.2 * rng.normal(size=len(near.embedding)))
        meta = dict(near.metadata, evidence_id=f"new{k}")
        out.append(TextNode(id_=f"new{k}", text=f"new passage {k}", metadata=meta, embedding=vec.tolist()))
    return out


@pytest.mark.parametrize("id_map", [False, True])
@pytest.mark.parametrize("mode", ["unsupervised", "supervised"])
def test_lent_rows_answer_as_a_copy_does(corpus, monkeypatch, id_map, mode):
    lent, copied = _pair(corpus, monkeypatch, id_map=id_map, mode=mode)
    queries = _queries(corpus)
    assert _answers(lent, queries) == _answers(copied, queries)
    context = lent.corpus.context
    for key in context.groups:
        a, b = context.members(key), copied.corpus.context.members(key)
        assert list(a.ids) == list(b.ids)
        np.testing.assert_array_equal(a.unit, b.unit)
    ids = [e.node_id for e in corpus[0][:7]] + ["nope"]
    va, ca = context.vectors_and_clusters(ids)
    vb, cb = copied.corpus.context.vectors_and_clusters(ids)
    assert ca == cb and va[-1] is None
    for x, y in zip(va[:-1], vb[:-1]):
        np.testing.assert_array_equal(x, y)


def test_the_clusters_hold_no_copy_of_the_vectors(corpus, monkeypatch):
    lent, copied = _pair(corpus, monkeypatch, id_map=True)
    store = lent.corpus.context.cluster_store_
    n, d = len(corpus[0]), len(corpus[0][0].embedding)
    held = sum(g.keys.nbytes + g.norms.nbytes for g in store.clusters.groups.values())
    assert held == n * 12  # a key and a norm a passage, no d-float vector
    assert sum(len(g) for g in store.clusters.groups.values()) == n
    assert store.claims.clusters.groups and all(g.is_claim.all() for g in store.claims.clusters.groups.values())
    assert d > 3


def test_edits_follow_the_store(corpus, monkeypatch, rng):
    lent, copied = _pair(corpus, monkeypatch, id_map=True)
    evidence = corpus[0]
    queries = _queries(corpus)
    new = _new_nodes(rng, evidence, 9)
    gone = [e.node_id for e in evidence[3:40:4]]
    for r in (lent, copied):
        r.insert_nodes([n.model_copy() for n in new])
        r.delete_nodes(gone)
        r.insert_nodes([new[2].model_copy(update={"text": "new passage 2, again"})])  # a replace
    assert _answers(lent, queries) == _answers(copied, queries)
    store = lent.corpus.context.cluster_store_
    assert not set(gone) & {i for i, _ in store.iter_items()}
    assert lent.corpus.context.n_items_ == copied.corpus.context.n_items_


def test_a_delete_on_the_index_directly_moves_no_vector(corpus, monkeypatch):
    """FAISS compacts its rows on a delete: the clusters find their rows again by key, and a deleted passage
    leaves every SOI even before ``sync()``."""
    lent, _ = _pair(corpus, monkeypatch, id_map=True)
    evidence = corpus[0]
    before = {e.node_id: v for e, v in zip(evidence, lent.corpus.context.unit_vectors([e.node_id for e in evidence]))}
    gone = [evidence[0].node_id, evidence[1].node_id, evidence[10].node_id]
    lent.index.delete_nodes(gone, delete_from_docstore=True)
    ids = [e.node_id for e in evidence]
    after = lent.corpus.context.unit_vectors(ids)
    for node_id, vector in zip(ids, after):
        if node_id in gone:
            assert vector is None
        else:
            np.testing.assert_array_equal(vector, before[node_id])
    for q in _queries(corpus):
        assert not set(gone) & set(lent.build_soi(q).item_ids)
    lent.index.delete_nodes([evidence[20].node_id], delete_from_docstore=True)  # not seen by the clusters yet
    lent.delete_nodes([evidence[30].node_id, evidence[31].node_id])  # the store now removed rows it never told
    gone += [evidence[20].node_id, evidence[30].node_id, evidence[31].node_id]
    for node_id, vector in zip(ids, lent.corpus.context.unit_vectors(ids)):
        if node_id in gone:
            assert vector is None
        else:
            np.testing.assert_array_equal(vector, before[node_id])
    assert lent.sync() == (0, 4)


def test_reload_reads_the_rows_again(corpus, monkeypatch, tmp_path):
    lent, copied = _pair(corpus, monkeypatch, id_map=True)
    loaded = {}
    for name, r in (("lent", lent), ("copied", copied)):
        r.insert_nodes(_new_nodes(np.random.default_rng(5), corpus[0], 4))
        r.delete_nodes([e.node_id for e in corpus[0][5:9]])
        r.persist(tmp_path / name, persist_index=True)
        with monkeypatch.context() as m:
            if name == "copied":
                m.setattr(FaissAdapter, "store_rows", lambda self: None)
            loaded[name] = ContextAwareRetriever.from_persist_dir(tmp_path / name, embed_model=corpus[2])
    assert isinstance(loaded["lent"].corpus.context.cluster_store_, RowClusterStore)
    assert isinstance(loaded["copied"].corpus.context.cluster_store_, MemoryClusterStore)
    queries = _queries(corpus)
    assert _answers(loaded["lent"], queries) == _answers(loaded["copied"], queries)
    for q in queries:
        assert loaded["lent"].build_soi(q).to_dict() == lent.build_soi(q).to_dict()


def test_other_stores_keep_their_copy(corpus):
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(simple_index(evidence, emb), claim_nodes=claims, **OPTIONS)
    assert isinstance(r.corpus.context.cluster_store_, MemoryClusterStore)


def test_stacked_rows_read_as_the_stacked_matrix(rng):
    """Slices (also across the store/claims boundary) and row arrays give what the stacked copy gives."""
    import faiss

    from llama_index_carag.core.store_rows import StackedRows
    from llama_index_carag.stores.faiss_rows import FaissRows

    evidence, _, emb = planted_corpus(rng)
    index = faiss_index(evidence, emb)
    lender = FaissRows.of(index)
    assert lender is not None and isinstance(faiss.downcast_index(index.vector_store.client), faiss.IndexFlat)
    matrix = lender.matrix()
    claims = rng.normal(size=(5, matrix.shape[1])).astype(np.float32)
    picked = np.array([4, 0, 7, 9, 2, 11], dtype=np.int64)
    for positions, store_part in ((None, matrix), (picked, matrix[picked])):
        keys = np.arange(len(store_part)) if positions is None else positions
        stacked = StackedRows(lender, keys, positions, claims)
        whole = np.vstack([store_part, claims])
        assert stacked.shape == whole.shape
        n = len(store_part)
        for sl in (slice(0, 3), slice(n - 2, n + 3), slice(n, n + 5), slice(1, None), slice(0, 0)):
            np.testing.assert_array_equal(stacked[sl], whole[sl])
        rows = np.array([n + 4, 0, n, n - 1, 2], dtype=np.int64)
        np.testing.assert_array_equal(stacked[rows], whole[rows])
    with pytest.raises(IndexError):
        stacked[::2]
