"""BM25 for CARAG's hybrid pool and its lexical term; the rest of the package imports it from here only.

* :class:`BM25Index`: the in-process index (fit, O(batch) edits, queries; :class:`~.index.BM25QueryScores` are one
  query's scores), with bm25s's tokenisation (:mod:`.tokens`) over segments of term counts (:mod:`.segments`);
* :class:`QdrantBM25`: BM25 kept in a Qdrant collection's sparse vector, fitted and restored by
  :class:`QdrantBM25Placement`;
* :class:`~.placement.FittedBM25`: either of them as the ranking reads it; :class:`BM25Placement`: a vector store that
  keeps BM25 itself (:mod:`.placement`);
* :class:`BM25Table`: the per-corpus fitted table (key ``lexical``) that gives the ranking the BM25 candidate
  source (:class:`BM25Source`) and the lexical term (:class:`BM25Relevance`).

Inside, no import cycle: ``index`` imports ``tokens`` and ``segments``; ``qdrant`` imports ``index``,
``placement`` and ``tokens``; ``source`` imports ``placement``; ``relevance`` imports ``source``; ``table``
imports ``index``, ``placement``, ``source`` and ``relevance``.  The Qdrant leg imports the Qdrant collection
helper of ``stores`` (the same layer as ``ranking``); ``stores`` imports only this door.
"""

from llama_index_carag.ranking.bm25.index import FIT_CHUNK, BM25Index
from llama_index_carag.ranking.bm25.placement import BM25Placement
from llama_index_carag.ranking.bm25.qdrant import BM25_VECTOR_NAME, QdrantBM25, QdrantBM25Placement
from llama_index_carag.ranking.bm25.relevance import BM25Relevance, lexical_provenance, scaled_lexical
from llama_index_carag.ranking.bm25.source import BM25Source
from llama_index_carag.ranking.bm25.table import BM25Table, bm25_source
from llama_index_carag.ranking.bm25.tokens import TOKEN_PATTERN, import_bm25s

__all__ = [
    "BM25_VECTOR_NAME",
    "FIT_CHUNK",
    "TOKEN_PATTERN",
    "BM25Index",
    "BM25Placement",
    "BM25Relevance",
    "BM25Source",
    "BM25Table",
    "QdrantBM25",
    "QdrantBM25Placement",
    "bm25_source",
    "import_bm25s",
    "lexical_provenance",
    "scaled_lexical",
]
