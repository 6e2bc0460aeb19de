"""CARAG's ranking: candidate sources, the candidate pool, scorers and the one re-ranking stage.

See :mod:`llama_index_carag.ranking.protocols` for how to plug in a new source or term.
"""

from llama_index_carag.ranking.pool import CandidatePool, RankQuery
from llama_index_carag.ranking.protocols import CandidateSource, Scorer, SearchRequest
from llama_index_carag.ranking.scorers import DenseSimilarity, Hubness, ThematicSimilarity
from llama_index_carag.ranking.sources import DenseSource
from llama_index_carag.ranking.stage import RerankStage

__all__ = [
    "CandidatePool",
    "CandidateSource",
    "DenseSimilarity",
    "DenseSource",
    "Hubness",
    "RankQuery",
    "RerankStage",
    "Scorer",
    "SearchRequest",
    "ThematicSimilarity",
]
