"""ContextAwareRetriever on synthetic embeddings, checked against a brute-force reference."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from llama_index.core.schema import MetadataMode, QueryBundle, TextNode

from llama_index_carag import CARAG_METADATA_KEY, ContextAwareRetriever
from llama_index_carag.core.persistence import StateError
from tests.helpers import faiss_index, planted_corpus, simple_index

REQUIRED_KEYS = {
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


@pytest.fixture()
def corpus(rng):
    return planted_corpus(rng)


def _unit(m):
    m = np.asarray(m, dtype=np.float64)
    return m / np.linalg.norm(m, axis=-1, keepdims=True)


def reference_topk(evidence, q, soi_rows_vectors, alpha, k):
    """Brute force: blend, cosine against every evidence vector, top k."""
    E = _unit([n.embedding for n in evidence])
    if len(soi_rows_vectors) and alpha < 1:
        T = np.mean(soi_rows_vectors, axis=0)
        b = alpha * np.asarray(q) + (1 - alpha) * T
        b = b / np.linalg.norm(b)
    else:
        b = np.asarray(q)
    scores = E @ b
    order = np.argsort(-scores, kind="stable")[:k]
    return [evidence[i].node_id for i in order], scores[order]


@pytest.mark.parametrize("store", ["faiss", "simple"])
def test_unsupervised_matches_brute_force(corpus, store):
    evidence, claims, emb = corpus
    index = (faiss_index if store == "faiss" else simple_index)(evidence, emb)
    r = ContextAwareRetriever.from_index(
        index, "paper", claim_nodes=claims, n_clusters=3, delta=0.5, alpha=0.5, similarity_top_k=5
    )
    ctx = r.context
    for claim in claims[::3]:
        q = np.asarray(claim.embedding)
        cluster = ctx.cluster_of(claim.node_id)
        soi_vecs = [
            _unit(e.embedding)
            for e in evidence
            if ctx.cluster_of(e.node_id) == cluster and float(_unit(e.embedding) @ q) > 0.5
        ]
        soi = r.build_soi(claim.text)
        assert len(soi) == len(soi_vecs)
        assert soi.claim_id == claim.node_id and soi.cluster == cluster
        ids, scores = reference_topk(evidence, q, soi_vecs, 0.5, 5)
        got = r.retrieve(claim.text)
        assert [n.node.node_id for n in got] == ids
        np.testing.assert_allclose([n.score for n in got], scores, rtol=1e-5, atol=1e-6)


def test_supervised_matches_brute_force(corpus):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "paper", mode="supervised", claim_nodes=claims, n_clusters=2, delta=0.3)
    ctx = r.context
    by_claim = {}
    for e in evidence:
        by_claim.setdefault(e.metadata["claim_id"], []).append(e)
    for claim in claims:
        cid, theme = claim.node_id, claim.metadata["theme"]
        q = np.asarray(claim.embedding)
        key = (ctx.theme_of(cid), ctx.cluster_of(cid))
        assert key[0] == theme
        same = lambda n, key=key: (ctx.theme_of(n.node_id), ctx.cluster_of(n.node_id)) == key  # noqa: E731
        sim = lambda n, q=q: float(_unit(n.embedding) @ q)  # noqa: E731
        related = [c for c in claims if c.node_id != cid and same(c)]
        related_ids = {c.node_id for c in related}
        annotated = [e for e in by_claim[cid] if same(e) and sim(e) > 0.3]
        thematic = [e for e in evidence if e.metadata["claim_id"] in related_ids and same(e) and sim(e) > 0.3]
        rel_kept = [c for c in related if sim(c) > 0.3]
        soi = r.build_soi(claim.text)
        assert {i.id for i in soi.annotated_evidences} == {e.node_id for e in annotated}
        assert {i.id for i in soi.related_claims} == {c.node_id for c in rel_kept}
        assert {i.id for i in soi.thematic_cluster_evidences} == {e.node_id for e in thematic}
        vecs = [_unit(n.embedding) for n in annotated + rel_kept + thematic]
        ids, scores = reference_topk(evidence, q, vecs, 0.5, 6)
        got = r.retrieve(claim.text)
        assert [n.node.node_id for n in got] == ids
        np.testing.assert_allclose([n.score for n in got], scores, rtol=1e-5, atol=1e-6)


def test_supervised_unknown_claim_takes_nearest_theme(corpus):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "paper", mode="supervised", claim_nodes=claims, n_clusters=2, delta=0.0)
    target = claims[5]  # theme T1
    emb.add("a brand new claim", target.embedding)
    soi = r.build_soi("a brand new claim")
    assert soi.claim_id is None and soi.annotated_evidences == []
    assert soi.theme == target.metadata["theme"]


@pytest.mark.parametrize("store", ["faiss", "simple"])
def test_alpha_one_equals_plain_retriever(corpus, store):
    evidence, claims, emb = corpus
    index = (faiss_index if store == "faiss" else simple_index)(evidence, emb)
    for mode in ("unsupervised", "supervised"):
        r = ContextAwareRetriever.from_index(
            index, "paper", mode=mode, claim_nodes=claims, n_clusters=3, alpha=1.0, delta=0.2
        )
        plain = index.as_retriever(similarity_top_k=6)
        for claim in claims:
            a, b = plain.retrieve(claim.text), r.retrieve(claim.text)
            assert [n.node.node_id for n in a] == [n.node.node_id for n in b]
            assert [n.score for n in a] == [n.score for n in b]


def test_empty_soi_falls_back_to_claim_vector(corpus):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3, delta=0.9999, alpha=0.3)
    plain = index.as_retriever(similarity_top_k=6)
    got = r.retrieve(claims[0].text)
    assert [n.node.node_id for n in got] == [n.node.node_id for n in plain.retrieve(claims[0].text)]
    info = got[0].node.metadata[CARAG_METADATA_KEY]
    assert info["fallback"] is True and info["soi_size"] == 0 and info["thematic_similarity"] is None


def test_min_size_fills_the_soi_without_reranking_by_items_below_delta(corpus):
    """Items ``soi_min_size`` adds below delta are the claim's nearest cluster items: shown, not re-ranking."""
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    alone = ContextAwareRetriever.from_index(index, claim_nodes=claims, n_clusters=3, delta=0.9999, soi_min_size=0)
    filled = alone.with_settings(soi_min_size=3)
    a, b = alone.retrieve(claims[0].text), filled.retrieve(claims[0].text)
    assert [n.node.node_id for n in a] == [n.node.node_id for n in b]
    assert [n.score for n in a] == pytest.approx([n.score for n in b], abs=1e-9)  # the same ranking
    before, after = a[0].node.metadata[CARAG_METADATA_KEY], b[0].node.metadata[CARAG_METADATA_KEY]
    assert before["soi_size"] == 0 and before["fallback"] is True
    assert after["soi_size"] == 3 and after["soi_filled"] == 3 and after["fallback"] is False
    assert after["thematic_similarity"] is not None and "thematic" not in after["terms"]  # weight 0: not a term
    soi = filled.build_soi(claims[0].text)
    assert len(soi) == 3 and soi.min_size == 3 and soi.threshold <= 0.9999
    members = filled.context.members((soi.theme, soi.cluster))
    q = np.asarray(emb.get_query_embedding(claims[0].text), dtype=np.float64)
    sims = members.unit @ (q / np.linalg.norm(q))
    nearest = sorted((i for i, c in enumerate(members.is_claim) if not c), key=lambda i: -sims[i])[:3]
    assert soi.item_ids == [members.ids[i] for i in nearest]  # the cluster's 3 nearest evidence items


def test_metadata_attached_hidden_and_docstore_untouched(corpus):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3, delta=0.3)
    got = r.retrieve(claims[1].text)
    assert len(got) == 6
    for n in got:
        info = n.node.metadata[CARAG_METADATA_KEY]
        assert set(info) >= REQUIRED_KEYS
        assert info["mode"] == "unsupervised" and info["alpha"] == 0.5 and info["delta"] == 0.3
        assert -1 <= info["claim_similarity"] <= 1
        assert CARAG_METADATA_KEY in n.node.excluded_llm_metadata_keys
        assert CARAG_METADATA_KEY in n.node.excluded_embed_metadata_keys
        assert "carag" not in n.node.get_content(MetadataMode.LLM)
        assert "carag" not in n.node.get_content(MetadataMode.EMBED)
        stored = index.docstore.get_node(n.node.node_id)
        assert CARAG_METADATA_KEY not in stored.metadata
    in_soi = [n for n in got if n.node.metadata[CARAG_METADATA_KEY]["in_soi"]]
    soi = r.build_soi(claims[1].text)
    assert {n.node.node_id for n in in_soi} <= set(soi.item_ids)
    assert all(n.node.metadata[CARAG_METADATA_KEY]["soi_size"] == len(soi) for n in got)


def test_claims_in_the_index_are_never_returned(corpus):
    evidence, claims, emb = corpus
    index = faiss_index(evidence + claims, emb)
    r = ContextAwareRetriever.from_index(
        index, "paper", claim_nodes=claims, n_clusters=3, delta=0.3, similarity_top_k=6
    )
    claim_ids = {c.node_id for c in claims}
    for claim in claims:
        got = r.retrieve(claim.text)
        assert len(got) == 6
        assert not claim_ids & {n.node.node_id for n in got}


def test_k_larger_than_corpus_returns_whole_corpus(corpus):
    evidence, claims, emb = corpus
    for make in (faiss_index, simple_index):
        r = ContextAwareRetriever.from_index(
            make(evidence, emb), "paper", claim_nodes=claims, n_clusters=3, similarity_top_k=1000
        )
        got = r.retrieve(claims[0].text)
        assert sorted(n.node.node_id for n in got) == sorted(e.node_id for e in evidence)


def test_async_equals_sync(corpus):
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(
        faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3, delta=0.3
    )

    async def run():
        return await asyncio.gather(*(r.aretrieve(c.text) for c in claims))

    for claim, got in zip(claims, asyncio.run(run())):
        want = r.retrieve(claim.text)
        assert [(n.node.node_id, n.score, n.node.metadata["carag"]) for n in got] == [
            (n.node.node_id, n.score, n.node.metadata["carag"]) for n in want
        ]


def test_persist_round_trip_identical(corpus, tmp_path):
    evidence, claims, emb = corpus
    for mode in ("unsupervised", "supervised"):
        index = faiss_index(evidence, emb)
        r = ContextAwareRetriever.from_index(
            index, "paper", mode=mode, claim_nodes=claims, n_clusters=3, delta=0.3, alpha=0.4
        )
        r.persist(tmp_path / mode)
        back = ContextAwareRetriever.from_persist_dir(tmp_path / mode, index=index)
        assert (back.alpha, back.delta, back.similarity_top_k, back.mode) == (0.4, 0.3, 6, mode)
        for claim in claims:
            a, b = r.retrieve(claim.text), back.retrieve(claim.text)
            assert [(n.node.node_id, n.score, n.node.metadata["carag"]) for n in a] == [
                (n.node.node_id, n.score, n.node.metadata["carag"]) for n in b
            ]
            assert r.build_soi(claim.text).to_dict() == back.build_soi(claim.text).to_dict()


def test_persisted_state_rejects_other_index_and_tampering(corpus, tmp_path):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3)
    state = r.persist(tmp_path)
    other = faiss_index(evidence[:-1], emb)
    with pytest.raises(StateError, match="differ"):
        ContextAwareRetriever.from_persist_dir(tmp_path, index=other)
    npy = sorted(state.glob("*.npy"))[0]
    npy.write_bytes(npy.read_bytes()[:-8])
    with pytest.raises(StateError, match="checksum"):
        ContextAwareRetriever.from_persist_dir(tmp_path, index=index)
    with pytest.raises(StateError, match="No CARAG state"):
        ContextAwareRetriever.from_persist_dir(tmp_path / "nothing", index=index)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"alpha": 1.5}, ValueError, "alpha must be in"),
        ({"alpha": -0.1}, ValueError, "alpha must be in"),
        ({"alpha": "0.5"}, TypeError, "alpha must be a number"),
        ({"delta": 1.2}, ValueError, "delta must be in"),
        ({"delta": float("nan")}, ValueError, "delta must not be NaN"),
        ({"similarity_top_k": 0}, ValueError, "similarity_top_k must be >= 1"),
        ({"similarity_top_k": 2.0}, TypeError, "similarity_top_k must be an integer"),
        ({"n_clusters": 0}, ValueError, "n_clusters must be >= 1"),
        ({"n_clusters": 10_000}, ValueError, "larger than the number of nodes"),
        ({"mode": "semi"}, ValueError, "mode must be"),
    ],
)
def test_bad_parameters(corpus, kwargs, exc, match):
    evidence, claims, emb = corpus
    with pytest.raises(exc, match=match):
        ContextAwareRetriever.from_index(faiss_index(evidence, emb), "paper", claim_nodes=claims, **kwargs)


def test_settings_are_frozen_and_bad_changes_keep_old_value(corpus):
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3)
    with pytest.raises(AttributeError, match="with_settings"):
        r.alpha = 0.3
    with pytest.raises(ValueError, match="alpha must be in"):
        r.with_settings(alpha=2)
    with pytest.raises(TypeError, match="soi_claims must be a non-negative integer"):
        r.with_settings(soi_claims="x")
    with pytest.raises(TypeError, match="soi_claims must be a non-negative integer"):
        ContextAwareRetriever.from_index(
            faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3, soi_claims="x"
        )
    assert r.alpha == 0.5 and r.settings.alpha == 0.5
    other = r.with_settings(alpha=0.9, similarity_top_k=2)
    assert other.context is r.context and other.alpha == 0.9 and r.alpha == 0.5
    assert len(other.retrieve(claims[0].text)) == 2


def test_bad_queries(corpus):
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3)
    for bad in ("", "   \n"):
        with pytest.raises(ValueError, match="empty"):
            r.retrieve(bad)
    with pytest.raises(ValueError, match="dimension 3 but the corpus embeddings have dimension 16"):
        r.retrieve(QueryBundle("x", embedding=[0.1, 0.2, 0.3]))
    with pytest.raises(ValueError, match="NaN"):
        r.retrieve(QueryBundle("x", embedding=[float("nan")] * 16))
    with pytest.raises(ValueError, match="all zeros"):
        r.retrieve(QueryBundle("x", embedding=[0.0] * 16))


def test_supervised_needs_themes_and_claims(corpus):
    evidence, claims, emb = corpus
    with pytest.raises(ValueError, match="claim_nodes"):
        ContextAwareRetriever.from_index(faiss_index(evidence, emb), "paper", mode="supervised")
    stripped = [
        TextNode(id_=e.node_id, text=e.text, embedding=e.embedding, metadata={"claim_id": e.metadata["claim_id"]})
        for e in evidence
    ]
    with pytest.raises(ValueError, match=r"needs a theme on every node; 60 node\(s\) lack it"):
        ContextAwareRetriever.from_index(faiss_index(stripped, emb), "paper", mode="supervised", claim_nodes=claims)


def test_empty_index_and_dimension_mismatch(corpus):
    from llama_index.core import VectorStoreIndex

    evidence, claims, emb = corpus
    with pytest.raises(ValueError, match="empty"):
        ContextAwareRetriever.from_index(VectorStoreIndex([], embed_model=emb), "paper", claim_nodes=claims)
    short = [c.model_copy(update={"embedding": c.embedding[:8]}) for c in claims]
    with pytest.raises(ValueError, match="dimension 8 but the index's have 16"):
        ContextAwareRetriever.from_index(faiss_index(evidence, emb), "paper", claim_nodes=short)


def test_node_without_embedding_in_simple_store(corpus):
    evidence, claims, emb = corpus
    index = simple_index(evidence, emb)
    index.vector_store.data.embedding_dict[evidence[0].node_id] = None
    with pytest.raises(ValueError, match="has no embedding"):
        ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3)


def test_nan_embedding_in_index_is_rejected(corpus):
    evidence, claims, emb = corpus
    index = simple_index(evidence, emb)
    index.vector_store.data.embedding_dict[evidence[3].node_id] = [float("nan")] * 16
    with pytest.raises(ValueError, match="NaN"):
        ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3)


def test_warns_when_labels_are_embedded(corpus, caplog):
    evidence, claims, emb = corpus
    leaky = [e.model_copy(update={"excluded_embed_metadata_keys": []}) for e in evidence]
    with caplog.at_level("WARNING"):
        ContextAwareRetriever.from_index(faiss_index(leaky, emb), "paper", claim_nodes=claims, n_clusters=3)
    assert "excluded_embed_metadata_keys" in caplog.text


def test_unsupervised_without_claims_and_id_map_store(corpus, tmp_path):
    evidence, claims, emb = corpus
    index = faiss_index(evidence, emb, id_map=True)
    r = ContextAwareRetriever.from_index(index, "paper", n_clusters=3, delta=0.3)
    emb.add("free text query", claims[2].embedding)
    got = r.retrieve("free text query")
    assert len(got) == 6 and all(n.node.metadata["carag"]["claim_id"] is None for n in got)
    r.persist(tmp_path)
    back = ContextAwareRetriever.from_persist_dir(tmp_path, index=index)
    assert [n.node.node_id for n in back.retrieve("free text query")] == [n.node.node_id for n in got]


def test_many_claims_in_the_index_trigger_a_wider_search(rng):
    evidence, claims, emb = planted_corpus(rng, claims_per_theme=15, evidence_per_claim=2)
    index = faiss_index(evidence + claims, emb)
    r = ContextAwareRetriever.from_index(
        index, "paper", claim_nodes=claims, n_clusters=3, delta=0.3, similarity_top_k=4
    )
    claim_ids = {c.node_id for c in claims}
    E = np.array([_unit(e.embedding) for e in evidence])
    for claim in claims[::5]:
        got = r.retrieve(claim.text)
        assert len(got) == 4 and not claim_ids & {n.node.node_id for n in got}
        plain = [evidence[i].node_id for i in np.argsort(-(E @ _unit(claim.embedding)))[:4]]
        assert [n.node.node_id for n in r.with_settings(alpha=1.0).retrieve(claim.text)] == plain


def test_claims_inserted_into_the_index_later_stay_claims(rng):
    evidence, claims, emb = planted_corpus(rng)
    index = faiss_index(evidence, emb, id_map=True)
    r = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3, delta=0.3)
    r.insert_nodes([c.model_copy(update={"embedding": None}) for c in claims[:3]])
    index.insert_nodes([c.model_copy(update={"embedding": None}) for c in claims[3:6]])
    claim_ids = {c.node_id for c in claims}
    for claim in claims[:6]:
        got = r.retrieve(claim.text)
        assert not claim_ids & {n.node.node_id for n in got}
        assert r.build_soi(claim.text).claim_id == claim.node_id  # still recognised as a corpus claim


def test_persisted_simple_store_reloads_without_an_index(corpus, tmp_path):
    evidence, claims, emb = corpus
    r = ContextAwareRetriever.from_index(simple_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=3)
    r.persist(tmp_path, persist_index=True)
    back = ContextAwareRetriever.from_persist_dir(tmp_path, embed_model=emb)
    for claim in claims[::4]:
        assert [n.node.node_id for n in r.retrieve(claim.text)] == [n.node.node_id for n in back.retrieve(claim.text)]


def test_persist_includes_nodes_added_directly_to_the_index(corpus, tmp_path):
    evidence, claims, emb = corpus
    index = faiss_index(evidence[:-3], emb, id_map=True)
    r = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3)
    index.insert_nodes([e.model_copy(update={"embedding": None}) for e in evidence[-3:]])
    r.persist(tmp_path)
    back = ContextAwareRetriever.from_persist_dir(tmp_path, index=index)
    assert all(e.node_id in back.context for e in evidence)
