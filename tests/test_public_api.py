"""The top-level API: what ``from llama_index_carag import ...`` offers, lazily, and what it does not."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import llama_index_carag

USER_NAMES = {
    "ContextAwareRetriever",
    "ThematicContextPostprocessor",
    "CARAG_METADATA_KEY",
    "CaragSettings",
    "DEFAULT",
    "PAPER",
    "get_fact_check_synthesizer",
    "Verdict",
    "VerdictLabel",
    "ClaimChecker",
    "CheckResult",
    "FactCheckChatBot",
    "resolve_llm",
    "load_factver",
    "load_demo_corpus",
}

#: not top-level, but still importable where they are defined
MODULE_ONLY = {
    "ThematicContext": "llama_index_carag.core.context",
    "CorpusItems": "llama_index_carag.core.context",
    "ClusterMembers": "llama_index_carag.core.soi",
    "build_supervised_soi": "llama_index_carag.core.soi",
    "build_unsupervised_soi": "llama_index_carag.core.soi",
    "SubsetOfInterest": "llama_index_carag.core.soi",
    "ThematicClusterer": "llama_index_carag.core.clustering",
    "TUNED": "llama_index_carag.settings",
    "PRESETS": "llama_index_carag.settings",
    "check_claims": "llama_index_carag.verdicts.bulk",
    "check_text": "llama_index_carag.verdicts.bulk",
    "extract_claims": "llama_index_carag.extraction.claims",
    "build_faiss_index": "llama_index_carag.retrieval.indexing",
    "resolve_embed_model": "llama_index_carag.models.resolve",
}


def test_every_exported_name_resolves_to_its_module_object():
    assert set(llama_index_carag.__all__) - {"__version__"} == USER_NAMES and len(USER_NAMES) <= 15
    assert llama_index_carag.__all__ == sorted(llama_index_carag._EXPORTS) + [
        "__version__"
    ]  # the literal list is in sync
    for name, module in llama_index_carag._EXPORTS.items():
        assert getattr(llama_index_carag, name) is getattr(importlib.import_module(module), name), name


@pytest.mark.parametrize("name, module", sorted(MODULE_ONLY.items()))
def test_internals_are_not_top_level_but_stay_importable(name, module):
    assert name not in llama_index_carag.__all__
    with pytest.raises(AttributeError, match=name):
        getattr(llama_index_carag, name)
    assert getattr(importlib.import_module(module), name) is not None


def test_import_is_lazy():
    code = (
        "import sys, llama_index_carag as p; "
        "print(sorted(m for m in sys.modules if m.startswith('llama_index_carag.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
