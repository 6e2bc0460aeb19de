"""Per-query latency: CARAG-u / CARAG vs the plain vector retriever on the same index.

    python benchmarks/bench_query.py --factver            # FactVer, MiniLM, query embedding included
    python benchmarks/bench_query.py --synthetic 10000 100000 1000000   # retrieval only
    python benchmarks/bench_query.py --quick              # small, for CI smoke runs

Variants are timed interleaved (A B C A B C …) in one run; we print medians
and ratios.  On FactVer a third variant re-embeds the query's cluster for every
query, as the papers' reference code did: the anchor to beat.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np
from _common import FACTVER, interleaved, machine, median_ms, table
from llama_index.core.schema import QueryBundle

from llama_index_carag import ContextAwareRetriever, load_factver
from llama_index_carag.core.vectors import blend_query, l2_normalize, thematic_embedding
from llama_index_carag.models.resolve import resolve_embed_model
from llama_index_carag.retrieval.indexing import build_faiss_index
from llama_index_carag.settings import TUNED

SYNTH_HEADER = (
    "|   passages | index s |  fit s | mean SOI | plain ms | CARAG-u ms | ratio |\n"
    "|-----------:|--------:|-------:|---------:|---------:|-----------:|------:|"
)


def bench_factver(n_queries: int, reembed_queries: int) -> None:
    corpus = load_factver(FACTVER)
    model = resolve_embed_model("minilm")
    t0 = time.perf_counter()
    index = build_faiss_index(corpus.evidence_nodes, model)
    print(f"indexed {len(corpus.evidence_nodes)} evidence passages in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    carag_u = ContextAwareRetriever.from_index(index, "paper", mode="unsupervised", claim_nodes=corpus.claim_nodes)
    print(f"CARAG-u fit (claims embedded + GMM): {time.perf_counter() - t0:.1f} s")
    claims_with_vectors = [
        n.model_copy(update={"embedding": carag_u.corpus.claim_vectors[i].tolist()})
        for i, n in enumerate(corpus.claim_nodes)
    ]
    t0 = time.perf_counter()
    carag = ContextAwareRetriever.from_index(index, "paper", mode="supervised", claim_nodes=claims_with_vectors)
    print(f"CARAG fit (GMM per theme): {time.perf_counter() - t0:.2f} s")
    tuned = ContextAwareRetriever.from_index(index, TUNED, claim_nodes=claims_with_vectors)
    plain = index.as_retriever(similarity_top_k=6)
    rng = np.random.default_rng(0)
    queries = [corpus.claim_nodes[i].text for i in rng.choice(len(corpus.claim_nodes), n_queries, replace=False)]

    def reembed(query: str) -> object:
        # What the reference code did: embed the claim, then re-embed every item of its cluster.
        q = np.asarray(model.get_query_embedding(query), dtype=np.float32)
        key = carag_u.context.locate(q, carag_u.context.match_claim(query))
        members = carag_u.context.members(key)
        texts = [members.texts[i] for i in range(len(members.ids)) if not members.is_claim[i]]
        vecs = l2_normalize(np.asarray(model.get_text_embedding_batch(texts), dtype=np.float32))
        keep = vecs[vecs @ l2_normalize(q) > carag_u.delta]
        search = blend_query(q, thematic_embedding(keep), carag_u.alpha)
        return plain.retrieve(QueryBundle(query, embedding=search.tolist()))

    variants = {
        "plain": plain.retrieve,
        "CARAG-u": carag_u.retrieve,
        "CARAG": carag.retrieve,
        "CARAG-u (tuned)": tuned.retrieve,
    }
    times = interleaved(variants, queries, repeats=2)
    slow = interleaved(
        {"plain": plain.retrieve, "CARAG-u": carag_u.retrieve, "re-embed": reembed}, queries[:reembed_queries], warmup=1
    )
    base = median_ms(times["plain"])
    rows = [[name, f"{median_ms(t):.2f}", f"{median_ms(t) / base:.3f}"] for name, t in times.items()]
    base2 = median_ms(slow["CARAG-u"])
    rows.append(
        [
            "re-embed (papers' code path)",
            f"{median_ms(slow['re-embed']):.1f}",
            f"{median_ms(slow['re-embed']) / median_ms(slow['plain']):.1f}",
        ]
    )
    print(
        f"\nFactVer ({len(corpus.evidence_nodes)} passages, MiniLM 384-d, k=6), query embedding included, "
        f"{len(queries)} queries x 2 interleaved; re-embed variant on {reembed_queries} queries. {machine()}"
    )
    print(table(rows, ["variant", "median ms/query", "ratio vs plain"]))
    print(
        f"CARAG-u / plain = {median_ms(times['CARAG-u']) / base:.3f}; "
        f"re-embed / CARAG-u = {median_ms(slow['re-embed']) / base2:.0f}x"
    )


def bench_synthetic(n: int, n_queries: int, spread: float = 0.6, clusters: int = 10) -> None:
    from _synthetic import planted_vectors, synthetic_index

    t0 = time.perf_counter()
    vectors = planted_vectors(n, spread=spread)
    index = synthetic_index(vectors)
    t_index = time.perf_counter() - t0
    t0 = time.perf_counter()
    carag_u = ContextAwareRetriever.from_index(
        index, "paper", mode="unsupervised", n_clusters=clusters, show_progress=False
    )
    t_fit = time.perf_counter() - t0
    plain = index.as_retriever(similarity_top_k=6)
    rng = np.random.default_rng(1)
    picks = rng.choice(n, n_queries, replace=False)
    noise = rng.normal(size=(n_queries, vectors.shape[1])).astype(np.float32) * 0.3 / np.sqrt(vectors.shape[1])
    queries = vectors[picks] + noise
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    bundles = [QueryBundle(f"q{i}", embedding=q.tolist()) for i, q in enumerate(queries)]
    times = interleaved({"plain": plain.retrieve, "CARAG-u": carag_u.retrieve}, bundles, repeats=2)
    sizes = [len(carag_u.build_soi(b)) for b in bundles[:50]]
    base, ours = median_ms(times["plain"]), median_ms(times["CARAG-u"])
    print(
        f"| {n:>9,} | {t_index:7.1f} | {t_fit:6.1f} | {np.mean(sizes):8.1f} | {base:8.2f} | {ours:8.2f} | {ours / base:5.3f} |",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--factver", action="store_true")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--reembed-queries", type=int, default=10)
    p.add_argument(
        "--synthetic", type=int, nargs="*", metavar="N", help="synthetic corpus sizes, e.g. 10000 100000 1000000"
    )
    p.add_argument("--clusters", type=int, default=10, help="t for the synthetic runs (papers: 10)")
    p.add_argument("--quick", action="store_true", help="tiny run (CI smoke)")
    args = p.parse_args()
    if args.quick:
        print(SYNTH_HEADER)
        bench_synthetic(5000, 20)
        return
    if args.factver:
        bench_factver(args.queries, args.reembed_queries)
    if args.synthetic:
        print(
            f"\nSynthetic corpora (384-d unit vectors, 50 planted centres), retrieval only (query vectors given), "
            f"CARAG-u at alpha=0.5, delta=0.75, t={args.clusters}, k=6; {args.queries} queries x 2 interleaved. "
            f"{machine()}"
        )
        print(SYNTH_HEADER)
        for n in args.synthetic:
            bench_synthetic(n, args.queries, clusters=args.clusters)


if __name__ == "__main__":
    main()
