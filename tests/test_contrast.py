"""The competing-claim table against a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.ranking.contrast import ClaimContrast
from tests.helpers import faiss_index, planted_corpus


def units(rng, n, d):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def brute(claims, vectors, q, threshold):
    others = claims[claims @ q <= threshold]
    if not len(others):
        return np.zeros(len(vectors), np.float32)
    return np.array([(others @ v).max() for v in vectors], np.float32)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    m=st.integers(1, 30),
    top=st.integers(1, 10),
    threshold=st.floats(-1.0, 1.0),
)
def test_table_matches_brute_force(seed, m, top, threshold):
    rng = np.random.default_rng(seed)
    claims, evidence = units(rng, m, 6), units(rng, 40, 6)
    q = claims[0] if seed % 2 else units(rng, 1, 6)[0]  # a corpus claim, or a new one
    assume(np.all(np.abs(claims @ q - threshold) > 1e-5))  # a cosine on the threshold itself is a float coin toss
    table = ClaimContrast(claims, top=top).fit([f"e{i}" for i in range(40)], evidence)
    picks = rng.choice(40, 12, replace=False)
    got = table.contrast([f"e{i}" for i in picks], [evidence[i] for i in picks], q, threshold)
    np.testing.assert_allclose(got, brute(claims, evidence[picks], q, threshold), atol=1e-5)


def test_unknown_and_forgotten_passages_are_computed_exactly(rng):
    claims, evidence = units(rng, 12, 8), units(rng, 20, 8)
    table = ClaimContrast(claims, top=2).fit([f"e{i}" for i in range(10)], evidence[:10])
    q = claims[3]
    changed = units(rng, 1, 8)[0]
    table.forget(["e4"])
    vectors = [evidence[i] for i in range(20)]
    vectors[4] = changed  # e4 was replaced by a new vector after the table was built
    got = table.contrast([f"e{i}" for i in range(20)], vectors, q, 0.9)
    np.testing.assert_allclose(got, brute(claims, np.array(vectors), q, 0.9), atol=1e-5)
    assert table.contrast(["e1", "e2"], [None, evidence[2]], q, 0.9)[0] == 0.0


def test_needs_claims():
    with pytest.raises(ValueError, match="at least one claim"):
        ClaimContrast(np.zeros((0, 4), np.float32))


def test_retriever_keeps_contrast_exact_after_insert_and_delete(rng):
    evidence, claims, emb = planted_corpus(rng)
    index = faiss_index(evidence[:-6], emb, id_map=True)
    r = ContextAwareRetriever.from_index(
        index,
        "paper",
        claim_nodes=claims,
        n_clusters=3,
        alpha=1.0,
        rerank_candidates=15,
        claim_contrast=0.4,
        contrast_threshold=0.95,
    )
    r.insert_nodes([e.model_copy(update={"embedding": None}) for e in evidence[-6:]])
    r.delete_nodes([evidence[0].node_id])
    live = evidence[1:]
    E = {e.node_id: np.asarray(e.embedding) / np.linalg.norm(e.embedding) for e in live}
    C = np.array([np.asarray(c.embedding) / np.linalg.norm(c.embedding) for c in claims])
    for claim in claims[::2]:
        q = np.asarray(claim.embedding) / np.linalg.norm(claim.embedding)
        others = C[C @ q <= 0.95]
        pool = sorted(E, key=lambda i: -(E[i] @ q))[:15]
        expect = sorted(pool, key=lambda i: -(E[i] @ q - 0.4 * (others @ E[i]).max()))[:6]
        assert [n.node.node_id for n in r.retrieve(claim.text)] == expect
    r.refit()
    assert set(r.corpus.tables["claim_contrast"].get_state()[0]["ids"]) == set(
        E
    )  # re-tabulated with the inserted passages


def test_table_is_built_in_blocks(rng, monkeypatch):
    import llama_index_carag.ranking.contrast as contrast_module

    monkeypatch.setattr(contrast_module, "_BLOCK_CELLS", 7)  # a few passages per block
    claims, evidence = units(rng, 3, 5), units(rng, 25, 5)
    table = ClaimContrast(claims, top=2).fit([f"e{i}" for i in range(25)], evidence)
    expect = np.sort(evidence @ claims.T, axis=1)[:, ::-1][:, :2]
    np.testing.assert_allclose(table.sims_, expect, atol=1e-6)
    with pytest.raises(ValueError, match="unit vectors of dimension 5"):
        ClaimContrast(claims).fit(["a"], units(rng, 1, 4))
