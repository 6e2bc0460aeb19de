"""The real offline LLMs: SmolLM2-135M (format only, never correctness) and, once, the default Qwen2.5-Coder-1.5B."""

from __future__ import annotations

import time

import pytest
from llama_index.core.query_engine import RetrieverQueryEngine

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.models.resolve import default_llm, resolve_llm
from llama_index_carag.verdicts import VerdictLabel, answer_sentences
from llama_index_carag.verdicts.synthesizer import VERDICT_KEY, get_fact_check_synthesizer

pytestmark = [pytest.mark.slow, pytest.mark.isolated]  # a native crash fails a test, not the run


@pytest.fixture(scope="module")
def smollm2():
    t0 = time.perf_counter()
    llm = resolve_llm("smollm2", max_new_tokens=96)
    print(f"SmolLM2 load: {time.perf_counter() - t0:.1f} s")
    return llm


def test_real_model_gives_a_well_formed_verdict(smollm2, demo_index, demo_corpus):
    r = ContextAwareRetriever.from_index(
        demo_index, "paper", claim_nodes=demo_corpus.claim_nodes, n_clusters=3, delta=0.5
    )
    engine = RetrieverQueryEngine(retriever=r, response_synthesizer=get_fact_check_synthesizer(smollm2))
    for claim in demo_corpus.claim_nodes[:2]:
        t0 = time.perf_counter()
        response = engine.query(claim.text)
        print(f"verdict in {time.perf_counter() - t0:.1f} s: {response.metadata[VERDICT_KEY].raw!r}")
        verdict = response.metadata[VERDICT_KEY]
        assert verdict.label in set(VerdictLabel)
        assert verdict.parsed, f"no label parsed from {verdict.raw!r}"
        assert response.response.strip()
        assert 1 <= len(answer_sentences(response.response)) <= 2
        assert len(response.source_nodes) == 6


def test_llm_argument_forms(smollm2):
    assert resolve_llm(smollm2) is smollm2  # any LlamaIndex LLM passes through
    with pytest.raises(TypeError, match="llm must be"):
        resolve_llm(42)
    with pytest.raises(OSError):  # offline: a hub id fails fast instead of hanging
        resolve_llm("some-org/definitely-not-a-local-model")


def test_default_llm_gives_one_checked_verdict():
    """The offline default (Qwen2.5-Coder-1.5B: llama.cpp, or transformers without it) on one short claim: a scored
    label, an explanation of at most two sentences citing only the shown passages, agreeing with the label."""
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_carag.models.llamacpp import llamacpp_available
    from llama_index_carag.models.resolve import llm_name
    from llama_index_carag.verdicts import sentence_stance
    from llama_index_carag.verdicts.explanation_checks import CONTRADICTING_STANCES

    t0 = time.perf_counter()
    llm = default_llm(max_new_tokens=48)
    print(f"Qwen load: {time.perf_counter() - t0:.1f} s ({llm_name(llm)})")
    synth = get_fact_check_synthesizer(llm, decision="llm")
    assert synth.label_mode == "score"
    # llama.cpp where it is installed; the LLM's own label is the arg-max of its label log-likelihoods
    assert ("llama.cpp" in llm_name(llm)) == llamacpp_available()
    assert synth.settings.decision == "llm" and synth.decision.name == "argmax"
    nodes = [NodeWithScore(node=TextNode(text="New Zealand has run an emissions trading scheme since 2008.", id_="E1"))]
    t0 = time.perf_counter()
    verdict = synth.synthesize("New Zealand has no carbon trading system.", nodes).metadata[VERDICT_KEY]
    print(f"Qwen verdict in {time.perf_counter() - t0:.1f} s: {verdict.label.value} {verdict.explanation!r}")
    assert verdict.parsed and verdict.method == "scored"
    assert set(verdict.label_scores) == {label.value for label in VerdictLabel}
    assert 1 <= len(answer_sentences(verdict.explanation)) <= 2
    assert set(verdict.cited_passages) <= {1} and verdict.evidence_ids == ["E1"] * len(verdict.cited_passages)
    assert not any(
        sentence_stance(s) in CONTRADICTING_STANCES[verdict.label] for s in answer_sentences(verdict.explanation)
    )
