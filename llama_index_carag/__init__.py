"""llama-index-carag: context-aware, explainable evidence retrieval for fact checking.

CARAG (supervised) and CARAG-u (unsupervised) from Vallayil et al. (2025) as a
LlamaIndex retriever: cluster the corpus embeddings with a Gaussian mixture,
build the claim's Subset of Interest, blend its thematic embedding into the
query, search the vector store, and say why each passage was chosen.

Everything a user needs is importable from here (``from llama_index_carag import
ContextAwareRetriever, CaragSettings, PAPER, get_fact_check_synthesizer, resolve_llm, Verdict``);
the names are imported on first use, so ``import llama_index_carag`` stays light and
has no side effects.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module that defines it.  Fitting internals (``ThematicContext``,
#: ``CorpusItems``, ``ClusterMembers``, ``build_*_soi``) stay importable from their modules only.
_EXPORTS: dict[str, str] = {
    # retrieval
    "ContextAwareRetriever": "llama_index_carag.retrieval.retriever",
    "CARAG_METADATA_KEY": "llama_index_carag.core.provenance",
    "ThematicContextPostprocessor": "llama_index_carag.retrieval.postprocessor",
    # settings and presets
    "CaragSettings": "llama_index_carag.settings",
    "DEFAULT": "llama_index_carag.settings",
    "PAPER": "llama_index_carag.settings",
    "TUNED": "llama_index_carag.settings",
    "PRESETS": "llama_index_carag.settings",
    # verdicts
    "get_fact_check_synthesizer": "llama_index_carag.verdicts.synthesizer",
    "FactCheckSynthesizer": "llama_index_carag.verdicts.synthesizer",
    "Verdict": "llama_index_carag.verdicts.types",
    "VerdictLabel": "llama_index_carag.verdicts.types",
    "parse_verdict": "llama_index_carag.verdicts.parsing",
    "FactCheckChatBot": "llama_index_carag.verdicts.chat",
    # one claim check as JSON (carag check --json, POST /v1/check)
    "check_claim": "llama_index_carag.verdicts.check",
    "ClaimChecker": "llama_index_carag.verdicts.check",
    "check_claims": "llama_index_carag.verdicts.batch",
    "check_text": "llama_index_carag.verdicts.text_check",
    "TextCheckResult": "llama_index_carag.verdicts.text_check",
    "CheckResult": "llama_index_carag.verdicts.check",
    # models by name
    "resolve_embed_model": "llama_index_carag.models.resolve",
    "resolve_llm": "llama_index_carag.models.resolve",
    "default_llm": "llama_index_carag.models.resolve",
    # loaders and indexes
    "ClaimEvidenceCorpus": "llama_index_carag.datasets",
    "load_claim_evidence_csv": "llama_index_carag.datasets",
    "load_demo_corpus": "llama_index_carag.datasets",
    "demo_corpus_path": "llama_index_carag.datasets",
    "load_factver": "llama_index_carag.datasets",
    "build_faiss_index": "llama_index_carag.retrieval.indexing",
    "StateError": "llama_index_carag.core.persistence",
    # check-worthy claims from a text
    "extract_claims": "llama_index_carag.extraction.claims",
    "ExtractedClaim": "llama_index_carag.extraction.claims",
    # what users build or get back
    "ThematicClusterer": "llama_index_carag.core.clustering",
    "SOIItem": "llama_index_carag.core.soi",
    "SubsetOfInterest": "llama_index_carag.core.soi",
}

#: a literal list for type checkers and linters; tests/test_public_api.py checks it is sorted(_EXPORTS) + ["__version__"]
__all__ = [
    "CARAG_METADATA_KEY",
    "CaragSettings",
    "CheckResult",
    "ClaimChecker",
    "ClaimEvidenceCorpus",
    "ContextAwareRetriever",
    "DEFAULT",
    "ExtractedClaim",
    "FactCheckChatBot",
    "FactCheckSynthesizer",
    "PAPER",
    "PRESETS",
    "SOIItem",
    "StateError",
    "SubsetOfInterest",
    "TUNED",
    "TextCheckResult",
    "ThematicClusterer",
    "ThematicContextPostprocessor",
    "Verdict",
    "VerdictLabel",
    "build_faiss_index",
    "check_claim",
    "check_claims",
    "check_text",
    "default_llm",
    "demo_corpus_path",
    "extract_claims",
    "get_fact_check_synthesizer",
    "load_claim_evidence_csv",
    "load_demo_corpus",
    "load_factver",
    "parse_verdict",
    "resolve_embed_model",
    "resolve_llm",
    "__version__",
]


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
    from llama_index_carag.core.clustering import ThematicClusterer
    from llama_index_carag.core.persistence import StateError
    from llama_index_carag.core.provenance import CARAG_METADATA_KEY
    from llama_index_carag.core.soi import SOIItem, SubsetOfInterest
    from llama_index_carag.datasets import (
        ClaimEvidenceCorpus,
        demo_corpus_path,
        load_claim_evidence_csv,
        load_demo_corpus,
        load_factver,
    )
    from llama_index_carag.extraction.claims import ExtractedClaim, extract_claims
    from llama_index_carag.models.resolve import default_llm, resolve_embed_model, resolve_llm
    from llama_index_carag.retrieval.indexing import build_faiss_index
    from llama_index_carag.retrieval.postprocessor import ThematicContextPostprocessor
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever
    from llama_index_carag.settings import DEFAULT, PAPER, PRESETS, TUNED, CaragSettings
    from llama_index_carag.verdicts.batch import check_claims
    from llama_index_carag.verdicts.chat import FactCheckChatBot
    from llama_index_carag.verdicts.check import CheckResult, ClaimChecker, check_claim
    from llama_index_carag.verdicts.parsing import parse_verdict
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer, get_fact_check_synthesizer
    from llama_index_carag.verdicts.text_check import TextCheckResult, check_text
    from llama_index_carag.verdicts.types import Verdict, VerdictLabel
