"""The BM25 candidate source: the query's top BM25 passages join the candidate pool beside the dense search.

It reads BM25 through a :class:`~llama_index_carag.ranking.bm25.placement.FittedBM25`: in process, a
:class:`~llama_index_carag.ranking.bm25.index.BM25Index` (one scoring pass per query, kept for the lexical
term and the provenance); in the vector store, :class:`~llama_index_carag.ranking.bm25.qdrant.QdrantBM25` (one
sparse query for the top ``n``, one more for the candidates outside it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from llama_index.core.schema import BaseNode, NodeWithScore

from llama_index_carag.ranking.bm25.placement import FittedBM25
from llama_index_carag.ranking.sources import SearchRequest

logger = logging.getLogger(__name__)


class BM25Source:
    """The top-``n`` BM25 passages of the query (a :class:`~llama_index_carag.ranking.sources.CandidateSource`,
    ``name = "lexical"``).

    Args:
        index: the fitted BM25 of the evidence (in process or in the vector store).
        nodes: ``nodes(ids) -> list[BaseNode | None]`` (docstore, or the vector store when it
            keeps the text).
        excluded: returns the ids never to return (claims stored in the index).
    """

    name = "lexical"

    def __init__(
        self,
        index: FittedBM25,
        nodes: Callable[[Sequence[str]], list[BaseNode | None]],
        excluded: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        self.index = index
        self._nodes = nodes
        self._excluded = excluded

    def search_ids(self, request: SearchRequest, n: int) -> list[str]:
        """The top-``n`` BM25 ids (positive score, never an excluded id), best first."""
        return self.index.top(request.query_str, n, self._excluded())[0]

    def search(self, request: SearchRequest, n: int) -> list[NodeWithScore]:
        ids, scores = self.index.top(request.query_str, n, self._excluded())
        return [
            NodeWithScore(node=node, score=float(score))
            for score, node in zip(scores, self._nodes(ids))
            if node is not None
        ]

    async def asearch(self, request: SearchRequest, n: int) -> list[NodeWithScore]:
        return await asyncio.to_thread(self.search, request, n)
