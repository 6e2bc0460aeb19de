"""One query's plan and its candidate search: checked inputs, the search plan, the pool built.

:func:`plan_query` checks and normalises the query vector once, builds its SOI, and
picks one of three searches from the settings: plain RAG's vector (``alpha = 1``
without penalties), the blended vector ``alpha * q + (1 - alpha) * T``, or a candidate
pool searched with ``q`` and re-ranked (``rerank_candidates``).  :func:`search_candidates` then searches the
plan's sources (by id when they all can: then no node is read from the docstore, the pool is built from the
fitted context's vectors and clusters) and builds the pool.  :func:`plan_and_search` is the two in one: a
re-ranking plan's dense search does not depend on the SOI, so it runs first and its hits spare the SOI a scan.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from llama_index_carag.core.context import ThematicContext
from llama_index_carag.core.corpus_items import SOIQuery
from llama_index_carag.core.soi import SubsetOfInterest, materialize_soi
from llama_index_carag.core.store_rows import StoreHits
from llama_index_carag.core.validation import check_query_text, sanitize_text
from llama_index_carag.core.vectors import as_vector, blend_query, l2_normalize
from llama_index_carag.ranking.pool import CandidatePool, RankQuery
from llama_index_carag.ranking.sources import CandidateSource, SearchRequest
from llama_index_carag.ranking.stage import thematic_weight
from llama_index_carag.settings import CaragSettings

if TYPE_CHECKING:  # pragma: no cover - typing only
    from llama_index.core.base.embeddings.base import BaseEmbedding


#: With ``dedupe``, fetch this many times k so that k distinct texts usually remain.
DEDUPE_OVERFETCH = 4


@dataclass
class QueryPlan:
    """Everything decided for one query before the candidate search."""

    request: SearchRequest
    query: RankQuery
    n: int
    rerank: bool = False
    soi: SOIQuery | None = None  # the SOI the plan was made from (its members carry texts with include_texts)


def checked_vector(embedding: Sequence[float], dim: int) -> np.ndarray:
    """The query embedding as a finite float32 vector, shape ``(dim,)``, not all zeros."""
    q = as_vector(embedding, dim=dim)
    if not np.any(q):
        raise ValueError("The query embedding is all zeros; cannot compute similarities.")
    return q


def plan_query(
    settings: CaragSettings,
    context: ThematicContext,
    query_str: str,
    embedding: list[float],
    *,
    include_texts: bool = False,
    nearest: StoreHits | None = None,
) -> QueryPlan:
    """The search plan of one query (``embedding``: its raw vector, checked here; ``include_texts``: the
    plan's SOI can be materialised with its texts; ``nearest``: the vector store's hits for ``embedding``,
    when the dense search ran first, see :func:`plan_and_search`)."""
    s = settings
    q = checked_vector(embedding, context.dim_)
    q_unit = l2_normalize(q)  # the one normalisation of the query; everything below takes unit vectors
    soi = context.query_soi(
        q_unit,
        s.delta,
        claim=query_str,
        top_m=s.soi_top_m,
        min_size=s.soi_min_size,
        n_related_claims=s.soi_claims,
        include_texts=include_texts,
        unit=True,
        nearest=nearest,
    )
    theme = soi.core.thematic_embedding
    query = RankQuery(
        query_str,
        q_unit,
        None if theme is None else l2_normalize(theme),
        soi.kinds(),
        len(soi.core),
        soi.key[1],
        soi.key[0],
        soi.claim_id,
        context.mode,
        soi.core.filled,
    )
    factor = DEDUPE_OVERFETCH if s.dedupe else 1
    if s.alpha >= 1.0 and not s.penalties:  # exactly plain RAG's vector
        return QueryPlan(SearchRequest(query_str, list(embedding)), query, s.similarity_top_k * factor, soi=soi)
    if s.rerank_candidates is not None and (theme is not None or s.penalties):
        n = max(s.rerank_candidates, s.similarity_top_k) * factor
        return QueryPlan(SearchRequest(query_str, list(embedding)), query, n, rerank=True, soi=soi)
    blend = 1.0 - thematic_weight(s, query)  # the claim's weight: alpha, or more when min_size widened the SOI
    search = list(embedding) if theme is None or blend >= 1.0 else blend_query(q, theme, blend).tolist()
    return QueryPlan(SearchRequest(query_str, search), query, s.similarity_top_k * factor, soi=soi)


def plan_and_search(
    settings: CaragSettings,
    context: ThematicContext,
    sources: Sequence[CandidateSource],
    query_str: str,
    embedding: list[float],
    *,
    include_texts: bool = False,
) -> tuple[QueryPlan, Found | None]:
    """The plan of one query and, when it re-ranks the claim's own nearest passages, its candidates too
    (``None``: search them with :func:`search_candidates`).

    Such a plan searches with the claim's vector whatever its SOI holds, so the dense search runs first and
    hands its hits, with their scores, to the SOI: a cluster store that reads the vector store's rows then
    need not scan the cluster.  The plan and the candidates are those of :func:`plan_query` and
    :func:`search_candidates`.
    """
    n = _dense_first(settings, sources)
    if n is None:
        return plan_query(settings, context, query_str, embedding, include_texts=include_texts), None
    dense_ids, hits = sources[0].search_hits(SearchRequest(query_str, list(embedding)), n)  # type: ignore[attr-defined]
    plan = plan_query(settings, context, query_str, embedding, include_texts=include_texts, nearest=hits)
    if not (plan.rerank and plan.n == n):  # an empty SOI without penalties: the plan searches otherwise
        return plan, None
    return plan, dense_ids + [i for src in sources[1:] for i in src.search_ids(plan.request, n)]  # type: ignore[attr-defined]


def _dense_first(settings: CaragSettings, sources: Sequence[CandidateSource]) -> int | None:
    """The re-ranking plan's candidate count when its dense search can run before the SOI, else ``None``."""
    s = settings
    if s.rerank_candidates is None or (s.alpha >= 1.0 and not s.penalties) or not sources:
        return None
    if not hasattr(sources[0], "search_hits") or not all(hasattr(src, "search_ids") for src in sources):
        return None
    return max(s.rerank_candidates, s.similarity_top_k) * (DEDUPE_OVERFETCH if s.dedupe else 1)


def embedding_strs(query_bundle: QueryBundle) -> list[str]:
    """The bundle's texts to embed, made safe for tokenizers (NULs, lone surrogates)."""
    strs = [sanitize_text(t) for t in query_bundle.embedding_strs]
    if not any(t.strip() for t in strs):
        raise ValueError("query is empty; give the claim to check.")
    return strs


def check_bundle(query_bundle: Any) -> QueryBundle:
    """``query_bundle`` itself, once it is a ``QueryBundle`` with a usable query text."""
    if not isinstance(query_bundle, QueryBundle):
        raise TypeError(f"query must be a string or a QueryBundle; got {type(query_bundle).__name__}.")
    check_query_text(query_bundle.query_str)
    return query_bundle


def query_embedding(embed_model: BaseEmbedding, query_bundle: QueryBundle) -> list[float]:
    """The bundle's own embedding, or its texts embedded with ``embed_model`` (one query vector)."""
    if query_bundle.embedding is not None:
        return list(query_bundle.embedding)
    return embed_model.get_agg_embedding_from_queries(embedding_strs(query_bundle))


async def aquery_embedding(embed_model: BaseEmbedding, query_bundle: QueryBundle) -> list[float]:
    """Async :func:`query_embedding`."""
    if query_bundle.embedding is not None:
        return list(query_bundle.embedding)
    return await embed_model.aget_agg_embedding_from_queries(embedding_strs(query_bundle))


def plan_soi(plan: QueryPlan, context: ThematicContext, settings: CaragSettings, claim: str) -> SubsetOfInterest:
    """The :class:`SubsetOfInterest` of the SOI query ``plan`` was built from (no second SOI computation)."""
    q = plan.soi
    if q is None:
        raise ValueError("The query plan holds no SOI query (plan_query records it).")
    return materialize_soi(
        q.core,
        q.members,
        mode=context.mode,
        claim=claim,
        claim_id=q.claim_id,
        delta=settings.delta,
        cluster=q.key[1],
        theme=q.key[0],
        min_size=settings.soi_min_size,
    )


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
