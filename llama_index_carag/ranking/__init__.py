"""CARAG's ranking: candidate sources, the candidate pool, the re-ranking terms and the one re-ranking stage.

See :mod:`llama_index_carag.ranking.source_and_scorer` for how to plug in a new source or scorer,
:mod:`llama_index_carag.ranking.rerank_term` for a new re-ranking term (weight, calibration grid, fitted table,
scorer) and :mod:`llama_index_carag.ranking.assembly` for the registry of terms.
"""

from llama_index_carag.ranking.fitted_table import FittedTable, TableCorpus
from llama_index_carag.ranking.pool import CandidatePool, RankQuery
from llama_index_carag.ranking.rerank_term import RerankTerm
from llama_index_carag.ranking.scorers import DenseSimilarity, Hubness, ThematicSimilarity
from llama_index_carag.ranking.source_and_scorer import CandidateSource, Scorer, SearchRequest
from llama_index_carag.ranking.sources import DenseSource
from llama_index_carag.ranking.stage import RerankStage

__all__ = [
    "CandidatePool",
    "CandidateSource",
    "DenseSimilarity",
    "DenseSource",
    "FittedTable",
    "Hubness",
    "RankQuery",
    "RerankStage",
    "RerankTerm",
    "Scorer",
    "SearchRequest",
    "TableCorpus",
    "ThematicSimilarity",
]
