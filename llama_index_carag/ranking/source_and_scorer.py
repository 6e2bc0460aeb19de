"""The two plug-in points of CARAG's ranking: candidate sources and scorers.

* A :class:`CandidateSource` finds candidates for a query (``search(request, n)``); the
  dense vector-store search (:class:`~llama_index_carag.ranking.sources.DenseSource`) is
  the first.  The pool is the union of the sources' hits
  (:meth:`~llama_index_carag.ranking.pool.CandidatePool.build`); a source may add a named
  column to the pool (``pool.columns["lexical"] = ...``).
* A :class:`Scorer` gives every candidate of a pool a score (``scores(pool, query)``) and
  says how much it counts for given settings (``weight(settings, query)``).  The
  :class:`~llama_index_carag.ranking.stage.RerankStage` ranks by
  ``sum(weight * scores)`` over the scorers whose weight is not 0, and writes each term into
  the provenance dict under the scorer's ``name``.

A re-ranking term of the package (or one registered from outside it) is one
:class:`~llama_index_carag.ranking.rerank_term.RerankTerm` in the registry of
:mod:`llama_index_carag.ranking.assembly`: its weight, range, calibration grid, optional fitted table and
scorer; its scorer is wrapped into a :class:`Scorer` weighted by the term.  A :class:`Scorer` may also be
passed to the retriever directly (``scorers=[...]``), weighting itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
from llama_index.core.schema import NodeWithScore

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.ranking.pool import CandidatePool, RankQuery
    from llama_index_carag.settings import CaragSettings

__all__ = ["SearchRequest", "CandidateSource", "Scorer"]


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


@runtime_checkable
class Scorer(Protocol):
    """One term of the re-ranking score."""

    name: str

    def scores(self, pool: CandidatePool, query: RankQuery) -> np.ndarray:
        """Shape ``(len(pool),)``: the term for every candidate."""
        ...

    def weight(self, settings: CaragSettings, query: RankQuery) -> float:
        """The term's weight in the final score (0 = not used)."""
        ...
