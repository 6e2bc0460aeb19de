"""CARAG's ranking: candidate sources, the candidate pool, scorers, fitted tables and the one re-ranking stage.

See :mod:`llama_index_carag.ranking.protocols` for how to plug in a new source or term, and
:mod:`llama_index_carag.ranking.tables` for a term fitted on the corpus.
"""

from llama_index_carag.ranking.pool import CandidatePool, RankQuery
from llama_index_carag.ranking.protocols import CandidateSource, Scorer, SearchRequest
from llama_index_carag.ranking.scorers import DenseSimilarity, Hubness, ThematicSimilarity
from llama_index_carag.ranking.sources import DenseSource
from llama_index_carag.ranking.stage import RerankStage
from llama_index_carag.ranking.tables import FittedTable, TableCorpus

__all__ = [
    "CandidatePool",
    "CandidateSource",
    "DenseSimilarity",
    "DenseSource",
    "FittedTable",
    "Hubness",
    "RankQuery",
    "RerankStage",
    "Scorer",
    "SearchRequest",
    "TableCorpus",
    "ThematicSimilarity",
]
