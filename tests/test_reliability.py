"""Concurrency, determinism, safe persistence, and property-based checks against brute force."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.core import persistence
from llama_index_carag.core.persistence import StateError
from llama_index_carag.core.soi import ClusterMembers, build_unsupervised_soi
from llama_index_carag.core.vectors import blend_query
from llama_index_carag.datasets import load_claim_evidence_csv
from tests.helpers import faiss_index, planted_corpus


def run(results):
    return [(n.node.node_id, n.score, n.node.metadata["carag"]) for n in results]


# ----------------------------------------------------------- concurrency
@pytest.fixture(scope="module")
def demo_retriever(demo_index, demo_corpus):
    return ContextAwareRetriever.from_index(
        demo_index, "paper", claim_nodes=demo_corpus.claim_nodes, n_clusters=3, delta=0.4
    )


@pytest.mark.integration
def test_200_concurrent_aretrieve_equal_sequential(demo_retriever, demo_corpus):
    claims = [c.text for c in demo_corpus.claim_nodes]
    queries = [claims[i % len(claims)] for i in range(200)]
    expected = {q: run(demo_retriever.retrieve(q)) for q in claims}

    async def main():
        return await asyncio.gather(*(demo_retriever.aretrieve(q) for q in queries))

    for q, got in zip(queries, asyncio.run(main())):
        assert run(got) == expected[q]


@pytest.mark.integration
def test_8_threads_equal_sequential(demo_retriever, demo_corpus):
    queries = [c.text for c in demo_corpus.claim_nodes] * 4
    expected = {q: run(demo_retriever.retrieve(q)) for q in set(queries)}
    barrier = threading.Barrier(8)

    def work(chunk):
        barrier.wait()
        return [(q, run(demo_retriever.retrieve(q))) for q in chunk]

    chunks = [queries[i::8] for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        for part in pool.map(work, chunks):
            for q, got in part:
                assert got == expected[q]


# ------------------------------------------------------------ determinism
def test_same_seed_same_clusters_sois_results_and_storage_order_does_not_matter(rng):
    evidence, claims, emb = planted_corpus(rng)
    shuffled = evidence[:]
    random.Random(5).shuffle(shuffled)
    a = ContextAwareRetriever.from_index(
        faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=4, random_state=7
    )
    b = ContextAwareRetriever.from_index(
        faiss_index(evidence, emb), "paper", claim_nodes=claims, n_clusters=4, random_state=7
    )
    c = ContextAwareRetriever.from_index(
        faiss_index(shuffled, emb), "paper", claim_nodes=claims[::-1], n_clusters=4, random_state=7
    )
    ids = [e.node_id for e in evidence] + [x.node_id for x in claims]
    assert a.context.clusters_of(ids) == b.context.clusters_of(ids) == c.context.clusters_of(ids)
    for claim in claims:
        assert (
            a.build_soi(claim.text).to_dict() == b.build_soi(claim.text).to_dict() == c.build_soi(claim.text).to_dict()
        )
        assert run(a.retrieve(claim.text)) == run(b.retrieve(claim.text))
        assert [n.node.node_id for n in a.retrieve(claim.text)] == [n.node.node_id for n in c.retrieve(claim.text)]


# -------------------------------------------------------- safe persistence
@pytest.fixture()
def persisted(rng, tmp_path):
    evidence, claims, emb = planted_corpus(rng)
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, n_clusters=3, delta=0.3)
    state = r.persist(tmp_path)
    return r, index, claims, tmp_path, state


def test_state_has_no_pickle_and_records_what_it_needs(persisted):
    r, index, claims, folder, state = persisted
    manifest = json.loads((state / persistence.MANIFEST_NAME).read_text())
    assert manifest["format"] == "llama-index-carag" and manifest["version"] == persistence.FORMAT_VERSION
    info = manifest["info"]
    assert info["embed_model"] == "table-embedding" and info["dim"] == 16 and len(info["evidence_ids_sha256"]) == 64
    for meta in manifest["arrays"].values():
        data = (state / meta["file"]).read_bytes()
        assert data.startswith(b"\x93NUMPY") and b"pickle" not in data.lower()
        assert np.load(state / meta["file"], allow_pickle=False).dtype.kind in "fiub"


def test_crash_mid_persist_leaves_previous_state_loadable(persisted, monkeypatch):
    r, index, claims, folder, state = persisted
    before = run(r.retrieve(claims[0].text))
    r = r.with_settings(alpha=0.2)
    real = persistence.atomic_write_bytes

    def crash_on_manifest(path, data):
        if path.name == persistence.MANIFEST_NAME:
            raise OSError("simulated crash")
        real(path, data)

    monkeypatch.setattr(persistence, "atomic_write_bytes", crash_on_manifest)
    with pytest.raises(OSError, match="simulated crash"):
        r.persist(folder)
    monkeypatch.undo()
    back = ContextAwareRetriever.from_persist_dir(folder, index=index)
    assert back.alpha == 0.5 and run(back.retrieve(claims[0].text)) == before
    assert not list(state.glob(".*.tmp"))  # no temp file left behind


@pytest.mark.parametrize(
    "damage", ["truncated manifest", "not json", "other format", "future version", "tampered array", "pickled array"]
)
def test_damaged_state_fails_clearly(persisted, damage):
    r, index, claims, folder, state = persisted
    manifest_path = state / persistence.MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    if damage == "truncated manifest":
        manifest_path.write_text(manifest_path.read_text()[:200])
    elif damage == "not json":
        manifest_path.write_bytes(b"\x80\x04pickle-ish")
    elif damage == "other format":
        manifest["format"] = "something-else"
        manifest_path.write_text(json.dumps(manifest))
    elif damage == "future version":
        manifest["version"] = 99
        manifest_path.write_text(json.dumps(manifest))
    elif damage == "tampered array":
        meta = next(iter(manifest["arrays"].values()))
        path = state / meta["file"]
        arr = np.load(path, allow_pickle=False)
        np.save(path, np.zeros_like(arr), allow_pickle=False)
    else:  # an attacker replaces an array with a pickle and fixes the checksum
        import hashlib
        import io

        name, meta = next(iter(manifest["arrays"].items()))
        buf = io.BytesIO()
        np.save(buf, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
        (state / meta["file"]).write_bytes(buf.getvalue())
        meta["sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
        manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(StateError):
        ContextAwareRetriever.from_persist_dir(folder, index=index)


def test_state_for_another_model_is_refused(persisted):
    from tests.helpers import TableEmbedding

    r, index, claims, folder, state = persisted
    other = TableEmbedding({"x": [1.0] * 16})
    other.model_name = "another-model"
    with pytest.raises(StateError, match="embed model"):
        ContextAwareRetriever.from_persist_dir(folder, index=index, embed_model=other)


# ---------------------------------------------------- property-based maths
unit_rows = st.integers(min_value=1, max_value=30).flatmap(
    lambda n: st.tuples(
        st.lists(st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=4, max_size=4), min_size=n, max_size=n),
        st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=4, max_size=4),
    )
)


@settings(max_examples=200, deadline=None)
@given(data=unit_rows, delta=st.floats(-1, 1), top_m=st.one_of(st.none(), st.integers(1, 10)))
def test_unsupervised_soi_matches_brute_force(data, delta, top_m):
    rows, q = data
    X = np.asarray(rows, dtype=np.float32)
    q = np.asarray(q, dtype=np.float32)
    assume(np.linalg.norm(q) > 1e-3 and (np.linalg.norm(X, axis=1) > 1e-3).all())
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    sims = unit.astype(np.float64) @ (q / np.linalg.norm(q))
    gaps = np.diff(np.sort(sims))
    assume(np.all(np.abs(sims - delta) > 1e-4) and (len(gaps) == 0 or gaps.min() > 1e-4))  # no float-precision ties
    members = ClusterMembers([f"i{k}" for k in range(len(X))], None, unit, np.zeros(len(X), bool), [None] * len(X))
    soi = build_unsupervised_soi(q, members, delta, top_m=top_m)
    expected = [int(i) for i in np.argsort(-sims) if sims[i] > delta][:top_m]
    got = [int(i.id[1:]) for i in soi.refined_cluster_evidences]
    assert got == expected
    if expected:
        np.testing.assert_allclose(soi.thematic_embedding, unit[expected].mean(axis=0), atol=1e-5)
    else:
        assert soi.thematic_embedding is None


@settings(max_examples=200, deadline=None)
@given(
    q=st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3),
    t=st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3),
    alpha=st.floats(0, 1),
)
def test_blend_matches_formula(q, t, alpha):
    q, t = np.asarray(q), np.asarray(t)
    raw = alpha * q + (1 - alpha) * t
    assume(np.linalg.norm(raw) == 0 or np.linalg.norm(raw) > 1e-6)  # float32 vectors: no underflow cases
    assume(np.linalg.norm(q) == 0 or np.linalg.norm(q) > 1e-6)
    out = blend_query(q, t, alpha)
    if alpha >= 1 or np.linalg.norm(raw) == 0:
        np.testing.assert_allclose(out, q.astype(np.float32))
    else:
        np.testing.assert_allclose(out, raw / np.linalg.norm(raw), atol=1e-5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), alpha=st.floats(0, 1), delta=st.floats(-0.5, 0.95), k=st.integers(1, 12))
def test_retriever_top_k_matches_brute_force(seed, alpha, delta, k):
    rng = np.random.default_rng(seed)
    evidence, claims, emb = planted_corpus(rng, n_themes=2, claims_per_theme=3, evidence_per_claim=4, dim=8)
    r = ContextAwareRetriever.from_index(
        faiss_index(evidence, emb),
        "paper",
        claim_nodes=claims,
        n_clusters=2,
        alpha=alpha,
        delta=delta,
        similarity_top_k=k,
    )
    E = np.array([e.embedding for e in evidence], dtype=np.float64)
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    claim = claims[seed % len(claims)]
    q = np.asarray(claim.embedding)
    soi = r.build_soi(claim.text)
    if soi.thematic_embedding is None or alpha >= 1:
        b = q
    else:
        b = alpha * q + (1 - alpha) * soi.thematic_embedding
        b /= np.linalg.norm(b)
    scores = E @ b
    got = r.retrieve(claim.text)
    assert len(got) == min(k, len(evidence))
    want = np.sort(scores)[::-1][: len(got)]
    np.testing.assert_allclose([n.score for n in got], want, atol=1e-5)


# ------------------------------------------------------------- CSV fuzzing
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(st.binary(max_size=400), st.text(max_size=400).map(lambda s: s.encode("utf-8", "surrogatepass"))))
def test_csv_loader_fuzz(tmp_path, body):
    path = tmp_path / "fuzz.csv"
    path.write_bytes(b"claim,evidence\n" + body)
    try:
        corpus = load_claim_evidence_csv(path)
    except ValueError:
        return  # the documented error: undecodable bytes, malformed CSV, missing columns
    assert corpus.n_rows == len(corpus.evidence_nodes) + len(corpus.skipped)
    for node in corpus.evidence_nodes + corpus.claim_nodes:
        node.text.encode("utf-8")  # safe text: no lone surrogates, no NULs
        assert "\x00" not in node.text


def test_refit_keeps_supervised_claims_and_postprocessor_follows(rng):
    from llama_index_carag.retrieval.postprocessor import ThematicContextPostprocessor

    evidence, claims, emb = planted_corpus(rng)
    index = faiss_index(evidence[:-6], emb, id_map=True)
    r = ContextAwareRetriever.from_index(index, "paper", mode="supervised", claim_nodes=claims, n_clusters=2, delta=0.2)
    pp = ThematicContextPostprocessor.from_retriever(r)
    r.insert_nodes([e.model_copy(update={"embedding": None}) for e in evidence[-6:]])
    r.refit()
    fresh = ContextAwareRetriever.from_index(
        index, "paper", mode="supervised", claim_nodes=claims, n_clusters=2, delta=0.2
    )
    for claim in claims[::3]:
        assert r.build_soi(claim.text).to_dict() == fresh.build_soi(claim.text).to_dict()
    nodes = index.as_retriever(similarity_top_k=8).retrieve(claims[0].text)
    out = pp.postprocess_nodes(nodes, query_str=claims[0].text)
    assert all(n.node.metadata["carag"]["cluster"] == r.context.cluster_of(n.node.node_id) for n in out)
