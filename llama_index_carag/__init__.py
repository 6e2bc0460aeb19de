"""llama-index-carag: context-aware, explainable evidence retrieval for fact checking.

CARAG (supervised) and CARAG-u (unsupervised) from Vallayil et al. (2025) as a
LlamaIndex retriever: cluster the corpus embeddings with a Gaussian mixture,
build the claim's Subset of Interest, blend its thematic embedding into the
query, search the vector store, and say why each passage was chosen.

Everything a user needs is importable from here (``from llama_index_carag import
ContextAwareRetriever, CaragSettings, TUNED, get_fact_check_synthesizer, Verdict``);
the names are imported on first use, so ``import llama_index_carag`` stays light and
has no side effects.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    # retrieval
    "ContextAwareRetriever": "llama_index_carag.retrieval.retriever",
    "CARAG_METADATA_KEY": "llama_index_carag.core.provenance",
    "ThematicContextPostprocessor": "llama_index_carag.retrieval.postprocessor",
    # settings and presets
    "CaragSettings": "llama_index_carag.settings",
    "PAPER": "llama_index_carag.settings",
    "TUNED": "llama_index_carag.settings",
    "PRESETS": "llama_index_carag.settings",
    "PAPER_SETTINGS": "llama_index_carag.settings",
    "TUNED_SETTINGS": "llama_index_carag.settings",
    # verdicts
    "get_fact_check_synthesizer": "llama_index_carag.verdicts.synthesizer",
    "FactCheckSynthesizer": "llama_index_carag.verdicts.synthesizer",
    "Verdict": "llama_index_carag.verdicts",
    "FactCheckChatBot": "llama_index_carag.verdicts.chat",
    # loaders and indexes
    "ClaimEvidenceCorpus": "llama_index_carag.datasets",
    "load_claim_evidence_csv": "llama_index_carag.datasets",
    "load_demo_corpus": "llama_index_carag.datasets",
    "load_factver": "llama_index_carag.datasets",
    "build_faiss_index": "llama_index_carag.retrieval.indexing",
    "StateError": "llama_index_carag.core.persistence",
    # the fitted pieces
    "ThematicClusterer": "llama_index_carag.core.clustering",
    "ThematicContext": "llama_index_carag.core.context",
    "CorpusItems": "llama_index_carag.core.context",
    "ClusterMembers": "llama_index_carag.core.soi",
    "SOIItem": "llama_index_carag.core.soi",
    "SubsetOfInterest": "llama_index_carag.core.soi",
    "build_supervised_soi": "llama_index_carag.core.soi",
    "build_unsupervised_soi": "llama_index_carag.core.soi",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'llama_index_carag' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from llama_index_carag.verdicts.chat import FactCheckChatBot
    from llama_index_carag.core.clustering import ThematicClusterer
    from llama_index_carag.core.context import CorpusItems, ThematicContext
    from llama_index_carag.datasets import ClaimEvidenceCorpus, load_claim_evidence_csv, load_demo_corpus, load_factver
    from llama_index_carag.retrieval.indexing import build_faiss_index
    from llama_index_carag.core.persistence import StateError
    from llama_index_carag.retrieval.postprocessor import ThematicContextPostprocessor
    from llama_index_carag.core.provenance import CARAG_METADATA_KEY
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever
    from llama_index_carag.settings import PAPER, PAPER_SETTINGS, PRESETS, TUNED, TUNED_SETTINGS, CaragSettings
    from llama_index_carag.core.soi import (
        ClusterMembers,
        SOIItem,
        SubsetOfInterest,
        build_supervised_soi,
        build_unsupervised_soi,
    )
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer, get_fact_check_synthesizer
    from llama_index_carag.verdicts import Verdict
