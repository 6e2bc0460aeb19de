"""Speed of the hybrid default against the plain dense retriever (ratios measured in one run).

    python benchmarks/bench_hybrid.py --factver           # build with BM25 vs dense-only; per query, embedding included
    python benchmarks/bench_hybrid.py --synthetic 100000  # retrieval only (query vectors given) at scale
    python benchmarks/bench_hybrid.py --quick             # small, for smoke runs

Targets (issue "Evidence retrieval that beats the best stock LlamaIndex pipeline"): default /
plain dense <= 1.25x per query with the query embedding on FactVer; <= 1.5x retrieval-only at
100k passages; index build with BM25 <= 1.2x the dense-only build.  Variants are timed
interleaved (A B A B ...) so a busy machine slows both alike.
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
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_carag import ContextAwareRetriever, load_factver
from llama_index_carag.models.resolve import resolve_embed_model
from llama_index_carag.ranking.bm25 import BM25Index
from llama_index_carag.retrieval.indexing import build_faiss_index
from llama_index_carag.settings import DEFAULT


def bench_factver(n_queries: int) -> None:
    corpus = load_factver(FACTVER)
    model = resolve_embed_model("minilm")
    nodes = corpus.evidence_nodes
    build_faiss_index(nodes[:64], model)  # warm the model up
    t0 = time.perf_counter()
    index = build_faiss_index(nodes, model)
    dense_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    BM25Index().fit(nodes)
    bm25_s = time.perf_counter() - t0
    print(f"build: dense-only {dense_s:.1f} s, BM25 {bm25_s:.2f} s -> with BM25 {(dense_s + bm25_s) / dense_s:.3f}x")
    t0 = time.perf_counter()
    default = ContextAwareRetriever.from_index(index, DEFAULT, claim_nodes=corpus.claim_nodes)
    print(f"default fit (claims embedded, GMM, BM25, contrast table): {time.perf_counter() - t0:.1f} s")
    plain = index.as_retriever(similarity_top_k=DEFAULT.similarity_top_k)
    rng = np.random.default_rng(0)
    queries = [corpus.claim_nodes[i].text for i in rng.choice(len(corpus.claim_nodes), n_queries, replace=False)]
    times = interleaved({"plain": plain.retrieve, "default": default.retrieve}, queries, repeats=2)
    rows = [
        [name, f"{median_ms(t):.2f}", f"{median_ms(t) / median_ms(times['plain']):.3f}x"] for name, t in times.items()
    ]
    print(f"\nFactVer, {len(nodes)} passages, {n_queries} queries x 2, query embedding included ({machine()})")
    print(table(rows, ["retriever", "median ms", "ratio"]))


def _synthetic_corpus(n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    from _synthetic import planted_vectors

    vectors = planted_vectors(n, dim, seed=seed)
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(20_000)])
    ranks = np.arange(1, len(vocab) + 1)
    p = (1.0 / ranks) / (1.0 / ranks).sum()  # Zipf-like word frequencies
    words = rng.choice(len(vocab), size=(n, 40), p=p)
    return vectors, [" ".join(vocab[row]) for row in words]


def bench_synthetic(n: int, n_queries: int, dim: int = 384) -> None:
    import faiss
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.vector_stores.faiss import FaissVectorStore

    vectors, texts = _synthetic_corpus(n, dim)
    flat = faiss.IndexFlatIP(dim)
    t0 = time.perf_counter()
    storage = StorageContext.from_defaults(vector_store=FaissVectorStore(faiss_index=flat))
    nodes = [TextNode(id_=f"n{i}", text=t, embedding=vectors[i].tolist()) for i, t in enumerate(texts)]
    index = VectorStoreIndex(nodes, storage_context=storage, embed_model=MockEmbedding(embed_dim=dim))
    print(f"indexed {n} synthetic passages in {time.perf_counter() - t0:.1f} s")
    claim_vectors, claim_texts = _synthetic_corpus(2000, dim, seed=1)
    claims = [TextNode(id_=f"c{i}", text=t, embedding=claim_vectors[i].tolist()) for i, t in enumerate(claim_texts)]
    t0 = time.perf_counter()
    default = ContextAwareRetriever.from_index(index, DEFAULT, claim_nodes=claims)
    print(f"default fit: {time.perf_counter() - t0:.1f} s")
    plain = index.as_retriever(similarity_top_k=DEFAULT.similarity_top_k)
    q_vectors, q_texts = _synthetic_corpus(n_queries, dim, seed=2)
    bundles = [QueryBundle(t, embedding=q_vectors[i].tolist()) for i, t in enumerate(q_texts)]
    times = interleaved({"plain": plain.retrieve, "default": default.retrieve}, bundles, repeats=2)
    rows = [
        [name, f"{median_ms(t):.2f}", f"{median_ms(t) / median_ms(times['plain']):.3f}x"] for name, t in times.items()
    ]
    print(f"\nsynthetic, {n} passages, {n_queries} queries x 2, retrieval only ({machine()})")
    print(table(rows, ["retriever", "median ms", "ratio"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--factver", action="store_true")
    parser.add_argument("--synthetic", type=int, nargs="*", default=None)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        bench_synthetic(5000, 30)
        return
    if args.factver:
        bench_factver(args.queries)
    for n in args.synthetic or []:
        bench_synthetic(n, args.queries)


if __name__ == "__main__":
    main()
