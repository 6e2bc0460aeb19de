"""The lexical term and the BM25 provenance of a ranked candidate.

:class:`BM25Relevance` is the re-ranking term ``lexical_weight * l(n)``, where ``l`` is the candidate's BM25
score min-max scaled within the pool and then stretched to the pool's range of dense cosines:
``l = (b - min b) / (max b - min b) * (max d - min d)``.  So ``lexical_weight = 1`` gives the best lexical
match as much pull as the spread of claim similarities, whatever BM25's raw scale on the corpus; ``0`` ignores
BM25.  Both read the BM25 of the :class:`~llama_index_carag.ranking.bm25.source.BM25Source` (nothing is scored
twice for one query).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from llama_index_carag.ranking.bm25.source import BM25Source
from llama_index_carag.ranking.pool import CandidatePool, RankQuery

if TYPE_CHECKING:  # pragma: no cover
    pass

logger = logging.getLogger(__name__)


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


class BM25Relevance:
    """The term ``lexical_weight * l(n)`` (see the module docstring); adds the pool column ``lexical``."""

    name = "lexical"

    def __init__(self, source: BM25Source) -> None:
        self.source = source

    def scores(self, pool: CandidatePool, query: RankQuery) -> np.ndarray:
        if "lexical" not in pool.columns:
            pool.columns["lexical"] = self.source.index.scores_of(query.query_str, pool.ids)
        known = pool.known
        out = np.zeros(len(pool), dtype=np.float64)
        if known.any():
            out[known] = scaled_lexical(pool.columns["lexical"][known], pool.columns["dense"][known])
        return out


def lexical_provenance(source: BM25Source, pool: CandidatePool, query_str: str, n: int) -> Callable[[int], dict]:
    """``row -> {"lexical_score", "lexical_rank"}``: each candidate's raw BM25 score and its rank in the
    query's top-``n`` BM25 list (``None`` when BM25 did not find it).  Reads the pool's ``lexical``
    column and the kept BM25 pass: nothing is scored again."""
    rank = {node_id: r + 1 for r, node_id in enumerate(source.index.top(query_str, n)[0])}

    def info(row: int) -> dict:
        if "lexical" not in pool.columns:  # set by BM25Relevance when the term is active
            pool.columns["lexical"] = source.index.scores_of(query_str, pool.ids)
        return {"lexical_score": float(pool.columns["lexical"][row]), "lexical_rank": rank.get(pool.ids[row])}

    return info
