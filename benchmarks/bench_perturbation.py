"""How far a tiny change of the embeddings moves CARAG's clusters and top-k (re-indexing on another CPU).

    python benchmarks/bench_perturbation.py [--scale 1e-6] [--seeds 3] [--presets paper default]

The encoder gives slightly different floats on different CPUs (MiniLM, AVX-512/AMX
vs AVX2: sd 4e-8, at most 3e-7 per component).  This takes the stored FactVer
MiniLM vectors (``tests/data/factver_minilm_vectors.npz``, evidence and claims),
adds Gaussian noise of standard deviation ``--scale`` to every component (the same
noise for repeated passages, which keep one vector on any CPU, unless
``--independent``), re-normalises, refits each preset (CARAG-u on FAISS
``IndexFlatIP``) and compares with the unperturbed
fit: the share of items (evidence + claims) whose GMM cluster changes (after the
best one-to-one matching of cluster numbers), the share of claims whose top-k set
or top-1 changes (by node id, and by text, since FactVer repeats passages under
several ids), the share the regression test (``tests/test_regression.py``) would
flag (anything beyond ties within ``--tol``: swaps of near-equal scores, a passage
entering or leaving at the k-th score), and the largest score change of a passage
found in both top-k lists.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
from _common import FACTVER, machine, table
from scipy.optimize import linear_sum_assignment

from llama_index_carag import ContextAwareRetriever, load_factver
from llama_index_carag.core.vectors import l2_normalize
from tests.factver_vectors import RefuseEmbedding, load_vectors, with_embeddings
from tests.test_regression import FIELDS, FLOAT_FIELDS, top_differences

Run = list[dict[str, Any]]


def perturbed(
    matrix: np.ndarray, scale: float, rng: np.random.Generator, *, same_for_equal_rows: bool = True
) -> np.ndarray:
    """Unit rows of ``matrix`` ``(n, d)`` plus N(0, scale²) noise per component, re-normalised (float32).

    With ``same_for_equal_rows`` equal rows (a passage repeated under several ids) get the same
    noise, as on another CPU, where the same text still gets the same vector.
    """
    rows, inverse = np.unique(matrix, axis=0, return_inverse=True) if same_for_equal_rows else (matrix, None)
    noisy = l2_normalize(rows.astype(np.float64) + rng.normal(scale=scale, size=rows.shape)).astype(np.float32)
    return noisy if inverse is None else noisy[inverse.reshape(-1)]


def fit(corpus: Any, evidence: np.ndarray, claims: np.ndarray, preset: str) -> tuple[ContextAwareRetriever, list[Any]]:
    """A retriever fitted with ``preset`` on a FAISS index of ``evidence`` ``(n_e, d)``; the claim nodes."""
    import faiss
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.vector_stores.faiss import FaissVectorStore

    nodes = with_embeddings(corpus.evidence_nodes, evidence)
    claim_nodes = with_embeddings(corpus.claim_nodes, claims)
    store = FaissVectorStore(faiss_index=faiss.IndexFlatIP(evidence.shape[1]))
    index = VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=RefuseEmbedding()
    )
    return ContextAwareRetriever.from_index(index, preset, claim_nodes=claim_nodes), claim_nodes


def top_k(retriever: ContextAwareRetriever, claims: list[Any]) -> Run:
    """The top-k of each claim (queried with its stored vector), as the regression test records it."""
    from llama_index.core.schema import QueryBundle

    out = []
    for claim in claims:
        got = retriever.retrieve(QueryBundle(claim.text, embedding=claim.embedding))
        out.append(
            {
                "ids": [n.node.node_id for n in got],
                "scores": [float(n.score) for n in got],
                "texts": [" ".join(n.node.get_content().lower().split()) for n in got],
                "carag": [{k: n.node.metadata["carag"].get(k) for k in FIELDS + FLOAT_FIELDS} for n in got],
            }
        )
    return out


def labels(retriever: ContextAwareRetriever) -> np.ndarray:
    """Cluster of every clustered item, shape ``(n_items,)`` (partitions in name order, numbered apart)."""
    clusterers = retriever.context.clusterers_
    return np.concatenate([clusterers[k].labels_ + 1000 * i for i, k in enumerate(sorted(clusterers, key=str))])


def changed_share(a: np.ndarray, b: np.ndarray) -> float:
    """Share of items whose cluster differs between labelings ``a`` and ``b`` (shape ``(n,)``), after the
    best one-to-one renumbering of ``b``'s clusters."""
    ua, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b, return_inverse=True)
    overlap = np.zeros((len(ua), len(ub)), dtype=np.int64)
    np.add.at(overlap, (ia, ib), 1)
    rows, cols = linear_sum_assignment(-overlap)
    return 1.0 - overlap[rows, cols].sum() / len(a)


def compare(base: Run, other: Run, tol: float) -> dict[str, float]:
    """Shares of claims whose top-k set / top-1 changed (by node id, and by text: FactVer repeats
    passages), or that the regression test would flag (:func:`tests.test_regression.top_differences`:
    beyond ties within ``tol``), and the largest score change of a passage in both top-k lists."""
    sets = [set(b["ids"]) != set(o["ids"]) for b, o in zip(base, other)]
    firsts = [b["ids"][:1] != o["ids"][:1] for b, o in zip(base, other)]
    text_sets = [set(b["texts"]) != set(o["texts"]) for b, o in zip(base, other)]
    text_firsts = [b["texts"][:1] != o["texts"][:1] for b, o in zip(base, other)]
    flagged = [bool(top_differences(o, b, tol)) for b, o in zip(base, other)]
    deltas = [
        abs(s - o["scores"][o["ids"].index(p)])
        for b, o in zip(base, other)
        for p, s in zip(b["ids"], b["scores"])
        if p in o["ids"]
    ]
    n = len(base)
    shares = {"set": sets, "top1": firsts, "text_set": text_sets, "text_top1": text_firsts, "flagged": flagged}
    return {**{k: sum(v) / n for k, v in shares.items()}, "dscore": max(deltas, default=0.0)}


def study(
    corpus: Any, evidence: np.ndarray, claims: np.ndarray, preset: str, args: argparse.Namespace
) -> list[list[str]]:
    """One table row per seed for ``preset``: changes against the unperturbed fit."""
    t0 = time.perf_counter()
    retriever, claim_nodes = fit(corpus, evidence, claims, preset)
    queries = claim_nodes[:: max(1, len(claim_nodes) // args.claims)][: args.claims]
    base_labels, base_run = labels(retriever), top_k(retriever, queries)
    print(f"{preset}: unperturbed fit + {len(queries)} queries in {time.perf_counter() - t0:.0f} s", flush=True)
    rows = []
    for seed in range(1, args.seeds + 1):
        rng = np.random.default_rng(seed)
        both = perturbed(np.vstack([evidence, claims]), args.scale, rng, same_for_equal_rows=not args.independent)
        noisy_e, noisy_c = both[: len(evidence)], both[len(evidence) :]
        retriever, claim_nodes = fit(corpus, noisy_e, noisy_c, preset)
        noisy_queries = {n.node_id: n for n in claim_nodes}
        run = top_k(retriever, [noisy_queries[q.node_id] for q in queries])
        c = compare(base_run, run, args.tol)
        pct = lambda x: f"{100 * x:.1f} %"  # noqa: E731
        moved = changed_share(base_labels, labels(retriever))
        shares = [pct(c[k]) for k in ("set", "top1", "text_set", "text_top1", "flagged")]
        rows.append([preset, str(seed), pct(moved), *shares, f"{c['dscore']:.1e}"])
        print(" | ".join(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1e-6, help="noise standard deviation per component")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--claims", type=int, default=200, help="claims queried (evenly spaced); all are clustered")
    parser.add_argument("--tol", type=float, default=1e-5, help="score difference counted as a tie")
    parser.add_argument("--presets", nargs="+", default=["paper", "default"])
    parser.add_argument("--independent", action="store_true", help="independent noise for repeated passages too")
    args = parser.parse_args()
    corpus = load_factver(FACTVER)
    evidence, claims = load_vectors(corpus)
    noise = f"noise sd {args.scale:g}/component ({'independent' if args.independent else 'same'} for repeated rows)"
    print(f"{machine()}; {len(evidence)} passages, {len(claims)} claims; {noise}, tie tol {args.tol:g}")
    t0 = time.perf_counter()
    rows = [row for preset in args.presets for row in study(corpus, evidence, claims, preset, args)]
    header = [
        "preset",
        "seed",
        "items re-clustered",
        "top-k ids changed",
        "top-1 id changed",
        "top-k texts changed",
        "top-1 text changed",
        "flagged (beyond ties)",
        "max |Δscore|",
    ]
    print(table(rows, header))
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
