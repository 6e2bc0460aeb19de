"""Lexical candidates and the lexical term: BM25 beside the dense search.

* :class:`LexicalSource` adds the query's top BM25 passages to the candidate pool
  (a :class:`~llama_index_carag.ranking.source_and_scorer.CandidateSource`).
* :class:`LexicalRelevance` is the re-ranking term ``lexical_weight * l(n)``, where ``l`` is
  the candidate's BM25 score min-max scaled within the pool and then stretched to the
  pool's range of dense cosines: ``l = (b - min b) / (max b - min b) * (max d - min d)``.
  So ``lexical_weight = 1`` gives the best lexical match as much pull as the spread of claim
  similarities, whatever BM25's raw scale on the corpus; ``0`` ignores BM25.

Both read BM25 through :class:`LexicalScores` (the query's top ``n``, and the scores of given ids):

* in process, over one :class:`~llama_index_carag.ranking.bm25.LexicalIndex`: a query's BM25 scores are
  computed once (every passage at once) and shared by the two through a small cache (:class:`_HitCache`);
* in the vector store (Qdrant's sparse vector,
  :class:`~llama_index_carag.backends.qdrant_lexical.QdrantLexicalIndex`): one sparse query for the top
  ``n``, one more for the candidates outside it.

The index is fitted, refitted and saved as a fitted table (:mod:`llama_index_carag.ranking.lexical_table`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
from llama_index.core.schema import BaseNode, NodeWithScore

from llama_index_carag.ranking.bm25 import LexicalHits, LexicalIndex
from llama_index_carag.ranking.pool import CandidatePool, RankQuery
from llama_index_carag.ranking.source_and_scorer import SearchRequest

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.settings import CaragSettings

logger = logging.getLogger(__name__)

__all__ = ["LexicalScores", "LexicalSource", "LexicalRelevance", "scaled_lexical", "lexical_provenance"]

_CACHE_SIZE = 64


@runtime_checkable
class LexicalScores(Protocol):
    """BM25 as the lexical source and term read it (in process or in the vector store)."""

    def top(self, query_str: str, n: int, exclude: frozenset[str] = frozenset()) -> tuple[list[str], np.ndarray]:
        """``(ids, scores)``: the query's top ``n`` passages by BM25 (score > 0, none in ``exclude``), best
        first; ``scores`` shape ``(len(ids),)`` float32."""
        ...

    def scores_of(self, query_str: str, node_ids: Sequence[str]) -> np.ndarray:
        """BM25 scores of ``node_ids``, shape ``(len(node_ids),)`` float32 (0 where not indexed or no match)."""
        ...


class _HitCache:
    """The last few queries' BM25 hits: one scoring pass per query, shared by the search, the
    lexical term and the provenance (a request for fewer hits is served from a longer list)."""

    def __init__(self, index: LexicalIndex) -> None:
        self.index = index
        self._lock = threading.Lock()
        self._hits: OrderedDict[str, tuple[int, LexicalHits]] = OrderedDict()

    def get(self, query_str: str, n: int) -> LexicalHits:
        """The query's hits, at least its top ``n`` (the list may be longer: slice it)."""
        with self._lock:
            entry = self._hits.get(query_str)
            if entry is not None and entry[0] >= n:
                self._hits.move_to_end(query_str)
                return entry[1]
        hits = self.index.query(query_str, n)
        with self._lock:
            self._hits[query_str] = (n, hits)
            self._hits.move_to_end(query_str)
            while len(self._hits) > _CACHE_SIZE:
                self._hits.popitem(last=False)
        return hits

    def top(self, query_str: str, n: int, exclude: frozenset[str] = frozenset()) -> tuple[list[str], np.ndarray]:
        """The top ``n`` hits not in ``exclude`` (:class:`LexicalScores`), from one scoring pass."""
        hits = self.get(query_str, n + len(exclude))
        if not exclude:
            return hits.ids[:n], hits.scores[:n]
        keep = [k for k, i in enumerate(hits.ids) if i not in exclude][:n]
        return [hits.ids[k] for k in keep], hits.scores[keep]

    def scores_of(self, query_str: str, node_ids: Sequence[str]) -> np.ndarray:
        """BM25 scores of ``node_ids`` (shape ``(k,)``), from the cached pass when there is one."""
        return self.index.lookup(self.get(query_str, 0), node_ids)


class LexicalSource:
    """The top-``n`` BM25 passages of the query (``name = "lexical"``).

    Args:
        index: the fitted BM25 index of the evidence: an in-process
            :class:`~llama_index_carag.ranking.bm25.LexicalIndex` (read through a :class:`_HitCache`), or
            any :class:`LexicalScores` (BM25 kept in the vector store; it caches its own answers).
        nodes: ``nodes(ids) -> list[BaseNode | None]`` (docstore, or the vector store when it
            keeps the text).
        excluded: returns the ids never to return (claims stored in the index).
    """

    name = "lexical"

    def __init__(
        self,
        index: LexicalIndex | LexicalScores,
        nodes: Callable[[Sequence[str]], list[BaseNode | None]],
        excluded: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        self.index = index
        self.cache: LexicalScores = _HitCache(index) if isinstance(index, LexicalIndex) else index
        self._nodes = nodes
        self._excluded = excluded

    def search_ids(self, request: SearchRequest, n: int) -> list[str]:
        """The top-``n`` BM25 ids (positive score, never an excluded id), best first."""
        return self.cache.top(request.query_str, n, self._excluded())[0]

    def search(self, request: SearchRequest, n: int) -> list[NodeWithScore]:
        ids, scores = self.cache.top(request.query_str, n, self._excluded())
        return [
            NodeWithScore(node=node, score=float(score))
            for score, node in zip(scores, self._nodes(ids))
            if node is not None
        ]

    async def asearch(self, request: SearchRequest, n: int) -> list[NodeWithScore]:
        return await asyncio.to_thread(self.search, request, n)


def scaled_lexical(bm25: np.ndarray, dense: np.ndarray) -> np.ndarray:
    """BM25 scores min-max scaled within the pool, times the pool's range of dense cosines.

    Args:
        bm25: shape ``(n,)``.
        dense: shape ``(n,)``.

    Returns:
        shape ``(n,)`` float64, in ``[0, max(dense) - min(dense)]`` (zeros when BM25 does not
        separate the candidates).
    """
    b = np.asarray(bm25, dtype=np.float64)
    d = np.asarray(dense, dtype=np.float64)
    if b.size == 0:
        return b
    spread = float(b.max() - b.min())
    if spread <= 0:
        return np.zeros_like(b)
    return (b - b.min()) / spread * float(d.max() - d.min())


class LexicalRelevance:
    """The term ``lexical_weight * l(n)`` (see the module docstring); adds the pool column ``lexical``."""

    name = "lexical"

    def __init__(self, source: LexicalSource) -> None:
        self.source = source

    def scores(self, pool: CandidatePool, query: RankQuery) -> np.ndarray:
        if "lexical" not in pool.columns:
            pool.columns["lexical"] = self.source.cache.scores_of(query.query_str, pool.ids)
        known = pool.known
        out = np.zeros(len(pool), dtype=np.float64)
        if known.any():
            out[known] = scaled_lexical(pool.columns["lexical"][known], pool.columns["dense"][known])
        return out

    def weight(self, settings: CaragSettings, query: RankQuery) -> float:
        return float(getattr(settings, "lexical_weight", 0.0))


def lexical_provenance(source: LexicalSource, pool: CandidatePool, query_str: str, n: int) -> Callable[[int], dict]:
    """``row -> {"lexical_score", "lexical_rank"}``: each candidate's raw BM25 score and its rank in the
    query's top-``n`` BM25 list (``None`` when BM25 did not find it).  Reads the pool's ``lexical``
    column and the cached BM25 pass: nothing is scored again."""
    rank = {node_id: r + 1 for r, node_id in enumerate(source.cache.top(query_str, n)[0])}

    def info(row: int) -> dict:
        if "lexical" not in pool.columns:  # set by LexicalRelevance when the term is active
            pool.columns["lexical"] = source.cache.scores_of(query_str, pool.ids)
        return {"lexical_score": float(pool.columns["lexical"][row]), "lexical_rank": rank.get(pool.ids[row])}

    return info
