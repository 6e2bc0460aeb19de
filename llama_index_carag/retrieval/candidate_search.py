"""One query's candidate search: the plan's sources searched (by id when they all can), and the pool built.

Searching by id (every source has ``search_ids``) reads no node from the docstore: the pool is built from
the fitted context's vectors and clusters, and only the nodes returned are read
(:meth:`~llama_index_carag.ranking.pool.CandidatePool.from_ids`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from llama_index.core.schema import BaseNode, NodeWithScore

from llama_index_carag.core.context import ThematicContext
from llama_index_carag.ranking.pool import CandidatePool
from llama_index_carag.ranking.sources import CandidateSource
from llama_index_carag.retrieval.query_plan import QueryPlan

logger = logging.getLogger(__name__)

__all__ = ["searches_by_id", "search_candidates", "asearch_candidates", "candidate_pool"]

#: What a search found: hits with their nodes, or node ids (a search by id).
Found = list[NodeWithScore] | list[str]


def searches_by_id(sources: Sequence[CandidateSource], plan: QueryPlan) -> bool:
    """Re-ranking with sources that can search by id: nodes are read only for what is returned."""
    return plan.rerank and all(hasattr(src, "search_ids") for src in sources)


def search_candidates(sources: Sequence[CandidateSource], plan: QueryPlan) -> Found:
    """Every source's hits for the plan, in the sources' order."""
    if searches_by_id(sources, plan):
        return [i for src in sources for i in src.search_ids(plan.request, plan.n)]  # type: ignore[attr-defined]
    hits: list[NodeWithScore] = []
    for source in sources:
        hits += source.search(plan.request, plan.n)
    return hits


async def asearch_candidates(sources: Sequence[CandidateSource], plan: QueryPlan) -> Found:
    """Async :func:`search_candidates` (the sources searched concurrently)."""
    if searches_by_id(sources, plan):
        return await asyncio.to_thread(search_candidates, sources, plan)
    found = await asyncio.gather(*(source.asearch(plan.request, plan.n) for source in sources))
    return [hit for hits in found for hit in hits]


def candidate_pool(
    found: Found, plan: QueryPlan, context: ThematicContext, loader: Callable[[list[str]], list[BaseNode | None]]
) -> CandidatePool:
    """The pool of what a search found (vectors and clusters from the fitted context; nodes from ``loader``
    only when the search was by id)."""
    if found and isinstance(found[0], str):
        return CandidatePool.from_ids(found, plan.query.unit, context.vectors_and_clusters, loader)
    return CandidatePool.build(found, plan.query.unit, context.vectors_and_clusters)  # type: ignore[arg-type]
