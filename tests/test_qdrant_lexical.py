"""BM25 inside Qdrant (a sparse vector with the IDF modifier): same scores and rankings as the in-process index."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

qdrant_client = pytest.importorskip("qdrant_client")
pytest.importorskip("llama_index.vector_stores.qdrant")

from llama_index.core.schema import MetadataMode, TextNode  # noqa: E402

from llama_index_carag import ContextAwareRetriever  # noqa: E402
from llama_index_carag.core.persistence import StateError  # noqa: E402
from llama_index_carag.datasets import uuid_node_id  # noqa: E402
from llama_index_carag.ranking.bm25 import BM25_VECTOR_NAME, BM25Index, BM25Source, QdrantBM25  # noqa: E402
from tests.helpers import TableEmbedding, faiss_index, planted_corpus  # noqa: E402
from tests.test_qdrant import assert_same_ranking, qdrant_index, with_uuid_ids  # noqa: E402

WORDS = [
    "apple",
    "banana",
    "cherry",
    "dog",
    "elephant",
    "fish",
    "grape",
    "house",
    "island",
    "jungle",
    "kite",
    "lemon",
    "mango",
    "night",
    "ocean",
    "piano",
    "queen",
    "river",
    "sun",
    "tree",
    "umbrella",
    "violin",
    "water",
    "xray",
    "yellow",
    "zebra",
    "running",
    "runs",
    "ran",
    "rainfall",
    "floods",
]
STOP = ["the", "a", "of", "and", "is"]
QUERIES = (
    [
        "apple banana",
        "running dog dog",  # a repeated token counts twice
        "zebra xray the of",  # stop words in the query match nothing
        "nothing matches zzqv",
        "ran runs sun sun sun rainfall",
        "Floods and RAINFALL in the river",
    ]
    + [" ".join(WORDS[i : i + 3]) for i in range(0, len(WORDS) - 3, 2)]
)


def texts_for(rng, n, *, prefix):
    """Random passages over a small vocabulary (shared terms, repeats, stop words), each unique."""
    out = []
    for i in range(n):
        k = int(rng.integers(2, 16))
        words = list(rng.choice(WORDS + STOP, size=k)) + [f"{prefix}{i}x"]
        out.append(" ".join(words))
    return out


def worded_corpus(rng, **kwargs):
    """``planted_corpus`` with word texts (so BM25 separates passages), uuid ids and a matching embed model."""
    evidence, claims, _ = planted_corpus(rng, **kwargs)
    ev_texts = texts_for(rng, len(evidence), prefix="ev")
    cl_texts = texts_for(rng, len(claims), prefix="cl")
    evidence = [e.model_copy(update={"text": t}) for e, t in zip(with_uuid_ids(evidence), ev_texts)]
    claims = [c.model_copy(update={"text": t}) for c, t in zip(claims, cl_texts)]
    table = {n.get_content(MetadataMode.EMBED): n.embedding for n in evidence + claims}
    return evidence, claims, TableEmbedding(table)


def text_of(node):
    return node.get_content(metadata_mode=MetadataMode.EMBED)


def reference_scores(texts, query, avgdl=None, k1=1.5, b=0.75):
    """bm25s's lucene BM25 by hand (float64), optionally with a given ``avgdl``; shape ``(len(texts),)``."""
    tok = BM25Index()
    vocab: dict[str, int] = {}
    tokens, lengths = tok.document_term_ids(texts, vocab)
    rows = np.repeat(np.arange(len(texts)), lengths)
    n = len(texts)
    avgdl = lengths.sum() / n if avgdl is None else avgdl
    out = np.zeros(n)
    for term in tok.tokenize(query):
        t = vocab.get(term)
        if t is None:
            continue
        tf = np.bincount(rows[tokens == t], minlength=n).astype(np.float64)
        df = int(np.count_nonzero(tf))
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        out += idf * tf / (tf + k1 * (1 - b + b * lengths / avgdl))
    return out


@pytest.fixture()
def corpus(rng):
    return worded_corpus(rng, claims_per_theme=5)


def test_parameters_are_validated_by_fit_and_queries_need_a_fit(corpus):
    from sklearn.exceptions import NotFittedError

    evidence, claims, emb = corpus
    index = qdrant_index(evidence, emb)
    with pytest.raises(ValueError, match="'b' parameter"):
        QdrantBM25(index.vector_store, b=2).fit()
    with pytest.raises(NotFittedError):
        QdrantBM25(index.vector_store).top("apple", 3)


def test_scores_equal_the_in_process_index(rng):
    texts = texts_for(rng, 80, prefix="p") + ["the of and", "apple apple apple apple"]  # dl 0, tf 4
    nodes = [
        TextNode(id_=uuid_node_id(f"n{i}"), text=t, embedding=rng.normal(size=8).tolist()) for i, t in enumerate(texts)
    ]
    emb = TableEmbedding({t: n.embedding for t, n in zip(texts, nodes)})
    index = qdrant_index(nodes, emb)
    lexical = QdrantBM25(index.vector_store).fit()
    ref = BM25Index().fit(nodes)
    ids = [n.node_id for n in nodes]
    assert len(lexical) == len(nodes) and lexical.n_fit_ == len(nodes)
    assert lexical.avgdl_ == pytest.approx(ref.segments_.sum_dl / ref.segments_.n_live)
    for query in QUERIES:
        expected = ref.all_scores(query)
        np.testing.assert_allclose(lexical.scores_of(query, ids), expected, rtol=1e-5, atol=1e-7)
        got_ids, got = lexical.top(query, 10)
        hits = ref.query(query, 10)
        np.testing.assert_allclose(got, hits.scores, rtol=1e-5)
        row = {i: r for r, i in enumerate(ids)}
        np.testing.assert_allclose(got, expected[[row[i] for i in got_ids]], rtol=1e-5)  # ties may swap ids
        np.testing.assert_allclose(got, reference_scores(texts, query)[[row[i] for i in got_ids]], rtol=1e-5)


def test_default_preset_on_qdrant_equals_the_in_process_hybrid(corpus):
    evidence, claims, emb = corpus
    kwargs = dict(claim_nodes=claims, n_clusters=3)
    on_faiss = ContextAwareRetriever.from_index(faiss_index(evidence, emb), "default", **kwargs)
    on_qdrant = ContextAwareRetriever.from_index(qdrant_index(evidence, emb), "default", **kwargs)
    assert on_qdrant.settings == on_faiss.settings and on_qdrant.settings.lexical_weight > 0
    assert isinstance(on_faiss.corpus.tables["lexical"].index, BM25Index)
    assert isinstance(on_qdrant.corpus.tables["lexical"].index, QdrantBM25)
    moved = 0
    for claim in claims:
        a, b = on_faiss.retrieve(claim.text), on_qdrant.retrieve(claim.text)
        assert_same_ranking(a, b)
        for x, y in zip(a, b):
            info_a, info_b = x.node.metadata["carag"], y.node.metadata["carag"]
            assert info_a["lexical_score"] == pytest.approx(info_b["lexical_score"], rel=1e-5, abs=1e-7)
            moved += info_a["lexical_rank"] is not None
    assert moved  # BM25 took part


def test_no_in_process_bm25_and_no_per_passage_state(corpus, tmp_path):
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(qdrant_index(evidence, emb), "default", claim_nodes=claims, n_clusters=3)
    table = r.corpus.tables["lexical"]
    assert not isinstance(table.index, BM25Index)
    source = next(s for s in r._sources if isinstance(s, BM25Source))
    assert source.index is table.index
    info, arrays = table.get_state()
    assert arrays == {}
    assert set(info) == {
        "placement",
        "format",
        "collection",
        "vector_name",
        "vocab",
        "avgdl",
        "n_fit",
        "k1",
        "b",
        "language",
        "stopwords",
    }
    assert len(info["vocab"]) < len(evidence) + len(WORDS)  # per term, not per passage
    r.persist(tmp_path / "state")
    manifest = json.loads((tmp_path / "state" / "carag" / "carag_manifest.json").read_text())
    entry = next(t for t in manifest["info"]["tables"] if t["key"] == "lexical")
    assert entry["arrays"] == {} and entry["info"]["placement"] == "qdrant"


def test_two_sparse_queries_at_most_per_retrieve(corpus, monkeypatch):
    evidence, claims, emb = corpus
    index = qdrant_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "default", claim_nodes=claims, n_clusters=3)
    client = index.vector_store.client
    calls = []
    real = client.query_points

    def spy(*args, **kw):
        calls.append(kw.get("using"))
        return real(*args, **kw)

    monkeypatch.setattr(client, "query_points", spy)
    for claim in claims[:5]:
        calls.clear()
        r.retrieve(claim.text + " apple")
        assert 1 <= calls.count(BM25_VECTOR_NAME) <= 2


def test_insert_and_delete_within_the_frozen_avgdl_tolerance(corpus, rng):
    evidence, claims, emb = corpus
    index = qdrant_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "default", claim_nodes=claims, n_clusters=3)
    lexical = r.corpus.tables["lexical"].index
    frozen = lexical.avgdl_
    new_texts = ["quokkaflux zebrabanana " + " ".join(rng.choice(WORDS, size=30)) + f" new{i}x" for i in range(6)]
    new = [
        TextNode(id_=uuid_node_id(f"new-{i}"), text=t, embedding=rng.normal(size=16).tolist())
        for i, t in enumerate(new_texts)
    ]
    r.insert_nodes(new)
    assert lexical.avgdl_ == frozen and "quokkaflux" in lexical.vocab_
    assert set(lexical.top("quokkaflux zebrabanana", 10)[0]) == {n.node_id for n in new}
    hits = r.retrieve("quokkaflux zebrabanana")
    assert any(
        h.node.metadata["carag"]["lexical_rank"] for h in hits if h.node.node_id in lexical.top("quokkaflux", 6)[0]
    )
    gone = [e.node_id for e in evidence[:10]]
    r.delete_nodes(gone)
    live = [e for e in evidence[10:]] + new
    texts = [text_of(n) for n in live]
    assert len(lexical) == len(live)
    now = BM25Index().fit(live)
    avgdl_now = now.segments_.sum_dl / now.segments_.n_live
    eps = abs(frozen / avgdl_now - 1)
    assert eps > 0.01  # long passages were added: the frozen avgdl is off
    tolerance = eps / (1 - eps) + 1e-5  # the stated bound on the relative error of every score
    ids = [n.node_id for n in live]
    worst = 0.0
    for query in QUERIES + ["quokkaflux apple"]:
        got = lexical.scores_of(query, ids)
        exact = now.all_scores(query)
        np.testing.assert_allclose(got, reference_scores(texts, query, avgdl=frozen), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(got, exact, rtol=tolerance, atol=1e-7)
        hit = exact > 0
        if hit.any():
            worst = max(worst, float(np.max(np.abs(got[hit] / exact[hit] - 1))))
    assert 0 < worst <= tolerance
    r.refit()  # a fresh avgdl: the in-process scores again
    fresh = r.corpus.tables["lexical"].index
    assert fresh.avgdl_ == pytest.approx(avgdl_now)
    for query in QUERIES:
        np.testing.assert_allclose(fresh.scores_of(query, ids), now.all_scores(query), rtol=1e-5, atol=1e-7)


def test_persist_and_reload(corpus, tmp_path):
    evidence, claims, emb = corpus
    index = qdrant_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "default", claim_nodes=claims, n_clusters=3)
    r.persist(tmp_path / "state")
    back = ContextAwareRetriever.from_persist_dir(tmp_path / "state", index=index)
    again = back.corpus.tables["lexical"].index
    assert isinstance(again, QdrantBM25)
    assert again.vocab_ == r.corpus.tables["lexical"].index.vocab_
    for claim in claims[::3]:
        assert [(h.node.node_id, round(h.score, 6)) for h in back.retrieve(claim.text)] == [
            (h.node.node_id, round(h.score, 6)) for h in r.retrieve(claim.text)
        ]


def test_reload_without_the_sparse_vector_is_a_clear_error(corpus, tmp_path):
    evidence, claims, emb = corpus
    index = qdrant_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "default", claim_nodes=claims, n_clusters=3)
    r.persist(tmp_path / "state")
    index.vector_store.client.delete_vector_name(index.vector_store.collection_name, BM25_VECTOR_NAME)
    with pytest.raises(StateError, match=r"no BM25 sparse vector 'carag_bm25'.*create_collection.*refit"):
        ContextAwareRetriever.from_persist_dir(tmp_path / "state", index=index)


def test_a_store_that_cannot_add_the_vector_falls_back_to_bm25_in_process(corpus, monkeypatch, caplog):
    """An older server or client: a warning that says how to create the collection, and BM25 in process (as
    before), which the state keeps and reloads."""
    import logging

    evidence, claims, emb = corpus
    index = qdrant_index(evidence, emb)

    def refuse(*args, **kwargs):
        raise RuntimeError("404 page not found")  # an older server

    monkeypatch.setattr(index.vector_store.client, "create_vector_name", refuse)
    with caplog.at_level(logging.WARNING, logger="llama_index_carag.ranking.bm25.table"):
        r = ContextAwareRetriever.from_index(index, "default", claim_nodes=claims, n_clusters=3)
    assert re.search(r"Cannot add the BM25 sparse vector.*sparse_vectors_config", caplog.text)
    assert isinstance(r.corpus.tables["lexical"].index, BM25Index)
    assert r.retrieve(claims[0].text)


def test_a_sparse_vector_without_idf_is_refused(corpus):
    from qdrant_client import models

    evidence, claims, emb = corpus
    index = qdrant_index(evidence, emb)
    index.vector_store.client.create_vector_name(
        index.vector_store.collection_name,
        BM25_VECTOR_NAME,
        models.SparseVectorNameConfig(sparse=models.SparseVectorConfig()),
    )
    with pytest.raises(ValueError, match="without the IDF modifier"):
        ContextAwareRetriever.from_index(index, "default", claim_nodes=claims, n_clusters=3)


def test_claims_stored_as_points_are_neither_returned_nor_counted(rng):
    evidence, claims, emb = worded_corpus(rng)
    claims = [c.model_copy(update={"id_": uuid_node_id(c.node_id)}) for c in claims]
    index = qdrant_index(evidence + claims, emb)
    r = ContextAwareRetriever.from_index(index, "default", claim_nodes=claims, n_clusters=3)
    lexical = r.corpus.tables["lexical"].index
    assert len(lexical) == len(evidence)  # the claims have no BM25 vector: not in N
    ref = BM25Index().fit(evidence)
    ids = [e.node_id for e in evidence]
    claim_ids = {c.node_id for c in claims}
    for claim in claims:
        np.testing.assert_allclose(lexical.scores_of(claim.text, ids), ref.all_scores(claim.text), rtol=1e-5, atol=1e-7)
        assert not claim_ids & set(lexical.top(claim.text, 50)[0])
        assert not claim_ids & {h.node.node_id for h in r.retrieve(claim.text)}


@pytest.mark.integration
def test_factver_default_preset_qdrant_equals_faiss(factver_index, factver_claims, minilm):
    """FactVer (MiniLM), the DEFAULT preset: the same top-10 from FAISS (BM25 in process) and from Qdrant
    local mode (BM25 in the collection's sparse vector)."""
    from llama_index.core.schema import QueryBundle

    from llama_index_carag.stores.vector_stores import get_node_embeddings

    ids, vectors = get_node_embeddings(factver_index)
    nodes = [
        n.model_copy(update={"id_": uuid_node_id(n.node_id), "embedding": v.tolist()})
        for n, v in zip(factver_index.docstore.get_nodes(ids), vectors)
    ]
    kwargs = dict(claim_nodes=factver_claims, similarity_top_k=10)
    on_faiss = ContextAwareRetriever.from_index(faiss_index(nodes, minilm), "default", **kwargs)
    on_qdrant = ContextAwareRetriever.from_index(qdrant_index(nodes, minilm), "default", **kwargs)
    assert isinstance(on_qdrant.corpus.tables["lexical"].index, QdrantBM25)
    for claim in factver_claims[::7]:
        q = QueryBundle(claim.text, embedding=claim.embedding)
        assert_same_ranking(on_faiss.retrieve(q), on_qdrant.retrieve(q))


def test_an_in_process_bm25_state_on_qdrant_loads_and_refit_moves_it(corpus, tmp_path):
    from llama_index_carag.ranking.bm25 import BM25Table

    evidence, claims, emb = corpus
    index = qdrant_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "default", claim_nodes=claims, n_clusters=3)
    r.corpus.tables["lexical"] = BM25Table(BM25Index().fit(evidence))  # fitted where the store could not take it
    r.persist(tmp_path / "state")
    back = ContextAwareRetriever.from_persist_dir(tmp_path / "state", index=index)
    assert isinstance(back.corpus.tables["lexical"].index, BM25Index)
    back.refit()
    assert isinstance(back.corpus.tables["lexical"].index, QdrantBM25)


def test_async_retrieve_matches_sync(corpus):
    import asyncio

    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(qdrant_index(evidence, emb), "default", claim_nodes=claims, n_clusters=3)
    for claim in claims[:3]:
        sync = [(h.node.node_id, h.score) for h in r.retrieve(claim.text)]
        assert [(h.node.node_id, h.score) for h in asyncio.run(r.aretrieve(claim.text))] == sync
