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

#: public name -> the module that defines it: what a LlamaIndex user needs.  Everything else (the SOI types,
#: the clusterer, loaders, the claim extraction, ...) is imported from the module or sub-package that defines it.
_EXPORTS: dict[str, str] = {
    # retrieval
    "ContextAwareRetriever": "llama_index_carag.retrieval.retriever",
    "ThematicContextPostprocessor": "llama_index_carag.retrieval.postprocessor",
    "CARAG_METADATA_KEY": "llama_index_carag.ranking.stage",
    # settings and presets (more presets: llama_index_carag.settings.PRESETS)
    "CaragSettings": "llama_index_carag.settings",
    "DEFAULT": "llama_index_carag.settings",
    "PAPER": "llama_index_carag.settings",
    # verdicts
    "get_fact_check_synthesizer": "llama_index_carag.verdicts.synthesizer",
    "Verdict": "llama_index_carag.verdicts.types",
    "VerdictLabel": "llama_index_carag.verdicts.types",
    # one claim checked end to end, and a chat bot (many claims: verdicts.bulk.check_claims; a text:
    # verdicts.bulk.check_text)
    "ClaimChecker": "llama_index_carag.verdicts.check",
    "CheckResult": "llama_index_carag.verdicts.check",
    "FactCheckChatBot": "llama_index_carag.verdicts.chat",
    # models and data
    "resolve_llm": "llama_index_carag.models.resolve",
    "load_factver": "llama_index_carag.datasets",
    "load_demo_corpus": "llama_index_carag.datasets",
}

#: a literal list for type checkers and linters; tests/test_public_api.py checks it is sorted(_EXPORTS) + ["__version__"]
__all__ = [
    "CARAG_METADATA_KEY",
    "CaragSettings",
    "CheckResult",
    "ClaimChecker",
    "ContextAwareRetriever",
    "DEFAULT",
    "FactCheckChatBot",
    "PAPER",
    "ThematicContextPostprocessor",
    "Verdict",
    "VerdictLabel",
    "get_fact_check_synthesizer",
    "load_demo_corpus",
    "load_factver",
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
    from llama_index_carag.datasets import load_demo_corpus, load_factver
    from llama_index_carag.models.resolve import resolve_llm
    from llama_index_carag.ranking.stage import CARAG_METADATA_KEY
    from llama_index_carag.retrieval.postprocessor import ThematicContextPostprocessor
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever
    from llama_index_carag.settings import DEFAULT, PAPER, CaragSettings
    from llama_index_carag.verdicts.chat import FactCheckChatBot
    from llama_index_carag.verdicts.check import CheckResult, ClaimChecker
    from llama_index_carag.verdicts.synthesizer import get_fact_check_synthesizer
    from llama_index_carag.verdicts.types import Verdict, VerdictLabel
