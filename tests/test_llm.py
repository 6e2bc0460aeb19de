"""The real offline LLM (SmolLM2-135M-Instruct): format only, never correctness."""

from __future__ import annotations

import time

import pytest
from llama_index.core.query_engine import RetrieverQueryEngine

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.models import default_llm, resolve_llm
from llama_index_carag.synthesizer import VERDICT_KEY, get_fact_check_synthesizer
from llama_index_carag.verdict import VerdictLabel, split_sentences

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    t0 = time.perf_counter()
    llm = default_llm(max_new_tokens=96)
    print(f"SmolLM2 load: {time.perf_counter() - t0:.1f} s")
    return llm


def test_real_model_gives_a_well_formed_verdict(smollm2, demo_index, demo_corpus):
    r = ContextAwareRetriever.from_index(demo_index, claim_nodes=demo_corpus.claim_nodes, n_clusters=3, delta=0.5)
    engine = RetrieverQueryEngine(retriever=r, response_synthesizer=get_fact_check_synthesizer(smollm2))
    for claim in demo_corpus.claim_nodes[:2]:
        t0 = time.perf_counter()
        response = engine.query(claim.text)
        print(f"verdict in {time.perf_counter() - t0:.1f} s: {response.metadata[VERDICT_KEY].raw!r}")
        verdict = response.metadata[VERDICT_KEY]
        assert verdict.label in set(VerdictLabel)
        assert verdict.parsed, f"no label parsed from {verdict.raw!r}"
        assert response.response.strip()
        assert 1 <= len(split_sentences(response.response)) <= 2
        assert len(response.source_nodes) == 6


def test_llm_argument_forms(smollm2):
    assert resolve_llm(smollm2) is smollm2  # any LlamaIndex LLM passes through
    with pytest.raises(TypeError, match="llm must be"):
        resolve_llm(42)
    with pytest.raises(OSError):  # offline: a hub id fails fast instead of hanging
        resolve_llm("some-org/definitely-not-a-local-model")
