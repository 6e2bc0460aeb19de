"""CARAG's ranking: candidate sources, the candidate pool, the re-ranking terms and the one re-ranking stage.

See :mod:`llama_index_carag.ranking.sources` for how to plug in a new source, :mod:`llama_index_carag.ranking.stage`
for a new scorer, :mod:`llama_index_carag.ranking.rerank_term` for a new re-ranking term (weight, calibration grid,
fitted table, scorer) and :mod:`llama_index_carag.ranking.assembly` for the registry of terms.
"""

from llama_index_carag.ranking.pool import CandidatePool, RankQuery

__all__ = ["CandidatePool", "RankQuery"]
