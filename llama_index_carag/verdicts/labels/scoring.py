"""Labels that always parse for local Hugging Face models: score the three label strings.

For a :class:`~llama_index.llms.huggingface.HuggingFaceLLM` the verdict is not
read from free text.  :class:`HFLabelScorer` renders the fact-check chat
prompt with the model's chat template, opens the answer with ``Verdict:`` and
runs **one forward pass** over it; the KV cache of that pass is reused to
compute the log-likelihood of each label string (``" SUPPORTED"``,
``" REFUTED"``, ``" NOT ENOUGH INFO"``: the sum of its token log-probabilities)
and then, cropped back to the prompt, to generate the explanation after
``Verdict: <chosen label>\\nExplanation:``.  The label is therefore always one
of the three, whatever the model would have written.

Per-label offsets (``bias``, in nats, added to the log-likelihoods before the
arg-max) let a measured rule shift decisions, e.g. towards NOT_ENOUGH_INFO
(:mod:`~llama_index_carag.verdicts.labels.calibration`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from llama_index_carag.verdicts import VerdictLabel
from llama_index_carag.verdicts.labels.scores import (
    ANSWER_PREFIX,
    LABEL_STRINGS,
    LabelScorer,
    LabelScores,
    clean_explanation,
    explanation_complete,
    score_then_explain,
)

logger = logging.getLogger(__name__)

__all__ = [
    "LABEL_STRINGS",
    "LabelScores",
    "LabelScorer",
    "HFLabelScorer",
    "ANSWER_PREFIX",
    "scorer_for",
    "explanation_complete",
    "clean_explanation",
]

K = TypeVar("K")


def scorer_for(llm: Any, max_new_tokens: int | None = None, max_sentences: int = 2) -> LabelScorer | None:
    """The label scorer for a ``HuggingFaceLLM``, a ``LlamaCPP`` or an ``OpenAILike`` whose server returns
    prompt log-probabilities; ``None`` for any other LLM."""
    modules = [c.__module__ for c in type(llm).__mro__]  # subclasses too, without importing either integration
    if any(m.startswith("llama_index.llms.llama_cpp") for m in modules):
        from llama_index_carag.verdicts.labels.scoring_llamacpp import LlamaCppLabelScorer

        return LlamaCppLabelScorer.from_llm(llm, max_new_tokens=max_new_tokens, max_sentences=max_sentences)
    if any(m.startswith("llama_index.llms.openai_like") for m in modules):  # a server: scored if it echoes logprobs
        from llama_index_carag.verdicts.labels.scoring_openai import OpenAILabelScorer

        return OpenAILabelScorer.from_llm(llm, max_new_tokens=max_new_tokens, max_sentences=max_sentences)
    if any(m.startswith("llama_index.llms.huggingface") for m in modules):  # only then import torch
        return HFLabelScorer.from_llm(llm, max_new_tokens=max_new_tokens, max_sentences=max_sentences)
    return None


@dataclass
class HFLabelScorer:
    """Score labels and write the explanation with a local causal LM (transformers).

    Args:
        model: a transformers causal LM.
        tokenizer: its tokenizer (with a chat template, or plain text prompts are used).
        max_new_tokens: budget of the explanation.
        max_sentences: generation stops once this many sentences are complete
            (or at a blank line / a new ``Verdict:``).
        stop_ids: token ids that end generation (the chat template's end-of-turn).
        generate_kwargs: extra ``generate`` arguments (greedy decoding by default).
    """

    model: Any
    tokenizer: Any
    max_new_tokens: int = 80
    stop_ids: Sequence[int] = ()
    generate_kwargs: dict[str, Any] = field(default_factory=dict)
    max_sentences: int = 2

    @classmethod
    def from_llm(cls, llm: Any, max_new_tokens: int | None = None, max_sentences: int = 2) -> HFLabelScorer | None:
        """A scorer for a LlamaIndex ``HuggingFaceLLM`` (its model and tokenizer); ``None`` for other LLMs."""
        try:
            from llama_index.llms.huggingface import HuggingFaceLLM
        except ImportError:  # pragma: no cover - the integration is a dependency
            return None
        if not isinstance(llm, HuggingFaceLLM):
            return None
        kwargs = {
            k: v for k, v in dict(llm.generate_kwargs or {}).items() if k in ("repetition_penalty", "pad_token_id")
        }
        return cls(
            model=llm._model,
            tokenizer=llm._tokenizer,
            max_new_tokens=int(max_new_tokens or min(llm.max_new_tokens, 72)),
            stop_ids=list(llm.stopping_ids or []),
            generate_kwargs=kwargs,
            max_sentences=max_sentences,
        )

    # ------------------------------------------------------------ prompt
    def render(self, messages: Sequence[Any], prefix: str = ANSWER_PREFIX) -> str:
        """The prompt text: ``messages`` (LlamaIndex ``ChatMessage``s) through the chat template, then ``prefix``."""
        rows = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(rows, tokenize=False, add_generation_prompt=True)
        else:
            text = "\n\n".join(r["content"] for r in rows) + "\n"
        return text + prefix

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    # ----------------------------------------------------------- scoring
    def score(self, messages: Sequence[Any]) -> tuple[LabelScores, Any, list[int]]:
        """``(scores, cache, prompt_ids)``: one forward pass over the prompt, the labels scored on its cache.

        The returned cache holds the prompt only (label tokens are cropped off).
        """
        logprobs, cache, prompt_ids = self._score_on_cache(self.render(messages), LABEL_STRINGS)
        return LabelScores(logprobs), cache, prompt_ids

    def score_options(
        self,
        messages: Sequence[Any],
        options: Mapping[K, str],
        prefix: str = ANSWER_PREFIX,
    ) -> tuple[dict[K, float], list[int]]:
        """``({key: log-likelihood}, prompt_ids)`` of each option string after the prompt ending in ``prefix``."""
        logprobs, _, prompt_ids = self._score_on_cache(self.render(messages, prefix), options)
        return logprobs, prompt_ids

    def _score_on_cache(self, prompt: str, options: Mapping[K, str]) -> tuple[dict[K, float], Any, list[int]]:
        import torch

        prompt_ids = self._ids(prompt)
        if not prompt_ids:
            raise ValueError("The rendered prompt is empty.")
        device = getattr(self.model, "device", "cpu")
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([prompt_ids], device=device), use_cache=True)
            cache, first = _returned_cache(out), torch.log_softmax(out.logits[0, -1].float(), dim=-1)
            logprobs: dict[K, float] = {}
            for key, text in options.items():
                ids = self._ids(text)
                if not ids:
                    raise ValueError(f"Option {key!r} has no tokens.")
                total = float(first[ids[0]])
                if len(ids) > 1:
                    step = self.model(
                        input_ids=torch.tensor([ids[:-1]], device=device),
                        use_cache=True,
                        **{_cache_arg(self.model): cache},
                    )
                    rest = torch.log_softmax(step.logits[0].float(), dim=-1)
                    total += float(sum(rest[i, t] for i, t in enumerate(ids[1:])))
                    _crop(cache, len(prompt_ids))
                logprobs[key] = total
        return logprobs, cache, prompt_ids

    def explain(self, label: VerdictLabel, cache: Any, prompt_ids: list[int]) -> str:
        """Generate the explanation after ``Verdict: <label>\\nExplanation:`` (reusing the prompt's cache)."""
        import torch

        cont = self._ids(LABEL_STRINGS[label] + "\nExplanation:")
        ids = torch.tensor([prompt_ids + cont], device=getattr(self.model, "device", "cpu"))
        kwargs: dict[str, Any] = {"do_sample": False, **self.generate_kwargs}
        if self.stop_ids:
            kwargs["eos_token_id"] = list(self.stop_ids)
        if kwargs.get("pad_token_id") is None and self.tokenizer.pad_token_id is None:
            kwargs["pad_token_id"] = self.tokenizer.eos_token_id
        from transformers import StoppingCriteriaList

        stop = StoppingCriteriaList([_SentenceStop(self.tokenizer, ids.shape[1], self.max_sentences)])
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=self.max_new_tokens,
                stopping_criteria=stop,
                **{_cache_arg(self.model): cache},
                **kwargs,
            )
        return clean_explanation(self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))

    def verdict(
        self,
        messages: Sequence[Any],
        bias: Mapping[VerdictLabel, float] | None = None,
        decide: Callable[[LabelScores], VerdictLabel] | None = None,
    ) -> tuple[VerdictLabel, LabelScores, str]:
        """``(label, scores, explanation)`` for one prompt: the best label after ``bias`` (or ``decide(scores)``), then its explanation."""
        return score_then_explain(self, messages, bias, decide)


def _cache_arg(model: Any) -> str:
    """The KV-cache keyword of ``model.forward``/``generate``: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    import inspect

    try:
        return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    except (TypeError, ValueError):  # pragma: no cover - unusual wrappers
        return "past_key_values"


def _returned_cache(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _crop(cache: Any, length: int) -> None:
    """Cut ``cache`` back to its first ``length`` tokens (a negative count works on old and new transformers)."""
    extra = int(cache.get_seq_length()) - length
    if extra > 0:
        cache.crop(-extra)


class _SentenceStop:
    """A transformers stopping criterion: :func:`explanation_complete` on the text generated after ``start``."""

    def __init__(self, tokenizer: Any, start: int, max_sentences: int) -> None:
        self.tokenizer, self.start, self.max_sentences = tokenizer, start, max_sentences

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        text = self.tokenizer.decode(input_ids[0, self.start :], skip_special_tokens=True)
        done = explanation_complete(text, self.max_sentences)
        return torch.full((input_ids.shape[0],), bool(done), dtype=torch.bool, device=input_ids.device)
