"""Candidate sources: what finds a query's candidates, and the first of them, the dense vector-store search.

A :class:`CandidateSource` finds candidates for a query (``search(request, n)``, with a :class:`SearchRequest`);
:class:`DenseSource`, the index's own vector-store search, is the first.  The pool is the union of the sources'
hits (:meth:`~llama_index_carag.ranking.pool.CandidatePool.build`); a source may add a named column to the pool
(``pool.columns["lexical"] = ...``).  The sources of a retriever are assembled by
:func:`~llama_index_carag.ranking.assembly.default_sources` (dense, then those the active terms' fitted tables
add, such as BM25's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
from llama_index.core.indices.vector_store.retrievers.retriever import VectorIndexRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_carag.core.store_rows import StoreHits

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding


@dataclass(frozen=True)
class SearchRequest:
    """What a candidate source searches with: the query text and the vector to search with
    (the claim's, or the blended ``alpha * q + (1 - alpha) * T``)."""

    query_str: str
    embedding: list[float]


@runtime_checkable
class CandidateSource(Protocol):
    """Finds candidates for a query."""

    name: str

    def search(self, request: SearchRequest, n: int) -> list[NodeWithScore]:
        """At least ``n`` hits when the corpus has them (never an excluded node), best first."""
        ...

    async def asearch(self, request: SearchRequest, n: int) -> list[NodeWithScore]:
        """Async :meth:`search`."""
        ...


def _has_native_async(store: Any) -> bool:
    """True when the store overrides LlamaIndex's default async query (which only calls ``query``)."""
    return type(store).aquery is not BasePydanticVectorStore.aquery


class DenseSource:
    """Nearest neighbours of the request's vector in the index's vector store.

    Excluded ids (claims stored in the index) are never returned: the search fetches a
    few spare hits, and searches again, wider, when too many of them were excluded.

    Args:
        index: the vector index.
        embed_model: the index's query model (the request always carries its vector).
        excluded: returns the ids never to return.
        native_async: whether the store's own async search is usable (``None``: whether the store
            overrides it; the retriever passes its vector-store adapter's answer, which also knows
            that Qdrant needs an async client).
    """

    name = "dense"

    def __init__(
        self,
        index: VectorStoreIndex,
        embed_model: BaseEmbedding,
        excluded: Callable[[], frozenset[str]],
        *,
        native_async: bool | None = None,
    ) -> None:
        self._index = index
        self._native_async = _has_native_async(index.vector_store) if native_async is None else bool(native_async)
        self._embed_model = embed_model
        self._excluded = excluded
        self._searchers: dict[int, VectorIndexRetriever] = {}

    def _searcher(self, top_k: int) -> VectorIndexRetriever:
        searcher = self._searchers.get(top_k)
        if searcher is None:
            if len(self._searchers) > 8:
                self._searchers.clear()
            searcher = VectorIndexRetriever(self._index, similarity_top_k=top_k, embed_model=self._embed_model)
            self._searchers[top_k] = searcher
        return searcher

    def _fetch_size(self, n: int, excluded: frozenset[str]) -> int:
        return n + min(len(excluded), n + 10)

    def search(self, request: SearchRequest, n: int) -> list[NodeWithScore]:
        excluded = self._excluded()
        fetch = self._fetch_size(n, excluded)
        bundle = QueryBundle(query_str=request.query_str, embedding=request.embedding)
        # The inner retriever's _retrieve, not retrieve: one retrieval event per query (ours), not two.
        results = self._searcher(fetch)._retrieve(bundle)
        kept = [r for r in results if r.node.node_id not in excluded]
        if len(kept) < n and len(results) == fetch:
            # Too many excluded ids among the hits: search again with room for all of them.
            wider = VectorIndexRetriever(self._index, similarity_top_k=n + len(excluded), embed_model=self._embed_model)
            kept = [r for r in wider._retrieve(bundle) if r.node.node_id not in excluded]
        return kept

    def search_ids(self, request: SearchRequest, n: int) -> list[str]:
        """The ids :meth:`search` would return, best first, without reading any node from the docstore."""
        return self.search_hits(request, n)[0]

    def search_hits(self, request: SearchRequest, n: int) -> tuple[list[str], StoreHits | None]:
        """:meth:`search_ids`, and the store's answer behind it: every id the search found (excluded ones too)
        with its score (``None`` when the store gave no scores)."""
        excluded = self._excluded()
        fetch = self._fetch_size(n, excluded)
        ids, scores = self._query(request.embedding, fetch)
        kept = [i for i in ids if i not in excluded]
        if len(kept) < n and len(ids) == fetch:
            fetch = n + len(excluded)
            ids, scores = self._query(request.embedding, fetch)
            kept = [i for i in ids if i not in excluded]
        if scores is None or len(scores) != len(ids):
            return kept, None
        norm = float(np.linalg.norm(np.asarray(request.embedding, dtype=np.float32)))
        return kept, StoreHits(ids, np.asarray(scores, dtype=np.float32), norm, fetch, self._index.vector_store)

    def _query(self, embedding: list[float], top_k: int) -> tuple[list[str], list[float] | None]:
        # What VectorIndexRetriever does, minus building the nodes: query, then map store ids to node ids.
        from llama_index.core.vector_stores.types import VectorStoreQuery

        store = self._index.vector_store
        result = store.query(VectorStoreQuery(query_embedding=embedding, similarity_top_k=top_k))
        if result.ids is None:
            return [n.node_id for n in result.nodes or []], result.similarities
        if not store.stores_text:
            nodes_dict = self._index.index_struct.nodes_dict
            return [nodes_dict.get(i, i) for i in result.ids], result.similarities
        return list(result.ids), result.similarities

    async def asearch(self, request: SearchRequest, n: int) -> list[NodeWithScore]:
        if not self._native_async:
            # No native async search (FAISS, simple): run it off the event loop.
            return await asyncio.to_thread(self.search, request, n)
        excluded = self._excluded()
        bundle = QueryBundle(query_str=request.query_str, embedding=request.embedding)
        results = await self._searcher(self._fetch_size(n, excluded))._aretrieve(bundle)
        return [r for r in results if r.node.node_id not in excluded]
