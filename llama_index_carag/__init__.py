"""llama-index-carag: context-aware, explainable evidence retrieval for fact checking.

CARAG (supervised) and CARAG-u (unsupervised) from Vallayil et al. (2025) as a
LlamaIndex retriever: cluster the corpus embeddings with a Gaussian mixture,
build the claim's Subset of Interest, blend its thematic embedding into the
query, search the vector store, and say why each passage was chosen.
"""

from llama_index_carag.clustering import ThematicClusterer
from llama_index_carag.context import CorpusItems, ThematicContext
from llama_index_carag.datasets import (
    ClaimEvidenceCorpus,
    load_claim_evidence_csv,
    load_demo_corpus,
    load_factver,
)
from llama_index_carag.retriever import CARAG_METADATA_KEY, ContextAwareRetriever
from llama_index_carag.soi import (
    ClusterMembers,
    SOIItem,
    SubsetOfInterest,
    build_supervised_soi,
    build_unsupervised_soi,
)

__version__ = "0.1.0"

__all__ = [
    "CARAG_METADATA_KEY",
    "ClaimEvidenceCorpus",
    "ClusterMembers",
    "ContextAwareRetriever",
    "CorpusItems",
    "SOIItem",
    "SubsetOfInterest",
    "ThematicClusterer",
    "ThematicContext",
    "build_supervised_soi",
    "build_unsupervised_soi",
    "load_claim_evidence_csv",
    "load_demo_corpus",
    "load_factver",
    "__version__",
]
