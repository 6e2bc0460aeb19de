"""BM25 in Qdrant against BM25 in process: top-k agreement of the DEFAULT preset on FactVer, and query cost.

    python benchmarks/bench_qdrant_lexical.py            # every claim, top-10
    python benchmarks/bench_qdrant_lexical.py --every 7  # a subset (the integration test's)

Fits the DEFAULT preset (claims given, so claim contrast on) twice on the same MiniLM vectors: on a FAISS
index (BM25 in process, :class:`~llama_index_carag.ranking.bm25.BM25Index`) and on a Qdrant local-mode
collection (BM25 in the ``carag_bm25`` sparse vector).  Reports, over the claims queried:

* identical: the two top-k id lists are equal;
* same texts: the two top-k lists of passage texts are equal (ids of repeated passages may differ);
* equal up to ties: equal except where exactly tied passages swap (FactVer repeats passages under
  several ids), the criterion of ``tests/test_qdrant.py::assert_same_ranking``;
* overlap@k: mean share of common ids;
* Qdrant calls per query (sparse queries; all ``query_points`` / ``retrieve`` calls).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
from _common import machine
from _factver_embeddings import factver_embeddings
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import QueryBundle

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.datasets import uuid_node_id
from llama_index_carag.ranking.bm25 import BM25_VECTOR_NAME
from llama_index_carag.retrieval.indexing import build_faiss_index


def same_up_to_ties(a, b, tol: float = 1e-5) -> bool:
    """``assert_same_ranking`` of tests/test_qdrant.py as a predicate."""
    sa, sb = [n.score for n in a], [n.score for n in b]
    if len(sa) != len(sb) or not np.allclose(sa, sb, atol=tol, rtol=0):
        return False
    groups: list[list[int]] = []
    for i, score in enumerate(sa):
        if groups and abs(score - sa[groups[-1][0]]) <= tol:
            groups[-1].append(i)
        else:
            groups.append([i])
    if not groups:
        return True
    for g in groups[:-1]:
        if {a[i].node.node_id for i in g} != {b[i].node.node_id for i in g}:
            return False
    return {a[i].node.get_content() for i in groups[-1]} == {b[i].node.get_content() for i in groups[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=1, help="query every n-th claim (default: all)")
    parser.add_argument("--top-k", type=int, default=10)
    args = parser.parse_args()

    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    corpus, _, _, model = factver_embeddings("minilm")
    nodes = [n.model_copy(update={"id_": uuid_node_id(n.node_id)}) for n in corpus.evidence_nodes]
    claims = corpus.claim_nodes
    kwargs = dict(claim_nodes=claims, similarity_top_k=args.top_k)
    t0 = time.perf_counter()
    on_faiss = ContextAwareRetriever.from_index(build_faiss_index(nodes, model), "default", **kwargs)
    faiss_fit = time.perf_counter() - t0
    client = QdrantClient(":memory:")
    store = QdrantVectorStore(client=client, collection_name="factver")
    index = VectorStoreIndex(
        [n.model_copy() for n in nodes],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=model,
    )
    t0 = time.perf_counter()
    on_qdrant = ContextAwareRetriever.from_index(index, "default", **kwargs)
    qdrant_fit = time.perf_counter() - t0

    calls = {"sparse": 0, "query_points": 0, "retrieve": 0}
    real_query, real_retrieve = client.query_points, client.retrieve

    def query_points(*a, **kw):
        calls["query_points"] += 1
        calls["sparse"] += kw.get("using") == BM25_VECTOR_NAME
        return real_query(*a, **kw)

    def retrieve(*a, **kw):
        calls["retrieve"] += 1
        return real_retrieve(*a, **kw)

    client.query_points, client.retrieve = query_points, retrieve  # type: ignore[method-assign]
    queried = claims[:: args.every]
    identical = tied = same_text = 0
    overlap = []
    t_faiss = t_qdrant = 0.0
    for claim in queried:
        q = QueryBundle(claim.text, embedding=claim.embedding)
        t0 = time.perf_counter()
        a = on_faiss.retrieve(q)
        t1 = time.perf_counter()
        b = on_qdrant.retrieve(q)
        t2 = time.perf_counter()
        t_faiss, t_qdrant = t_faiss + t1 - t0, t_qdrant + t2 - t1
        ia, ib = [n.node.node_id for n in a], [n.node.node_id for n in b]
        identical += ia == ib
        same_text += [n.node.get_content() for n in a] == [n.node.get_content() for n in b]
        tied += same_up_to_ties(a, b)
        overlap.append(len(set(ia) & set(ib)) / max(len(ia), 1))
    n = len(queried)
    k = args.top_k
    print(f"FactVer, {len(nodes)} passages, {n} claims, DEFAULT preset top-{k} ({machine()})")
    print(f"fit: FAISS + in-process BM25 {faiss_fit:.1f} s; Qdrant local + sparse BM25 {qdrant_fit:.1f} s")
    print(f"identical top-{k}: {identical}/{n} ({identical / n:.1%})")
    print(f"same passage texts in the same order: {same_text}/{n} ({same_text / n:.1%})")
    print(f"equal up to exact ties: {tied}/{n} ({tied / n:.1%})")
    print(f"mean overlap@{k}: {np.mean(overlap):.4f}")
    print(
        f"per query: {calls['sparse'] / n:.2f} sparse queries, {calls['query_points'] / n:.2f} query_points, "
        f"{calls['retrieve'] / n:.2f} retrieve calls; {1000 * t_faiss / n:.1f} ms (FAISS) vs "
        f"{1000 * t_qdrant / n:.1f} ms (Qdrant local mode)"
    )


if __name__ == "__main__":
    main()
