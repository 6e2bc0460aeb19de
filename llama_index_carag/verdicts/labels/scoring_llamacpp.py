"""Scored labels for GGUF models run by llama.cpp (LlamaIndex's ``LlamaCPP`` LLM).

The same procedure as :class:`~llama_index_carag.verdicts.labels.scoring.HFLabelScorer`,
on a ``llama_cpp.Llama``: the chat prompt (the LLM's own ``messages_to_prompt``)
ends with ``Verdict:`` and is evaluated once; each label string is scored token
by token on top of it and cut off again; the explanation is then generated
after ``Verdict: <label>\\nExplanation:`` on the evaluated prompt.  Each prompt is
evaluated from its first token, so its scores and explanation do not depend on
what the model evaluated before (llama.cpp's batch kernels round a token slightly
differently depending on where it falls in a batch).

Needs the optional ``llama-cpp-python`` and ``llama-index-llms-llama-cpp``
packages; without them :meth:`LlamaCppLabelScorer.from_llm` returns ``None``.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from llama_index_carag.verdicts import VerdictLabel
from llama_index_carag.verdicts.labels.scores import (
    ANSWER_PREFIX,
    LABEL_STRINGS,
    LabelScores,
    clean_explanation,
    explanation_complete,
    score_then_explain,
)

logger = logging.getLogger(__name__)

__all__ = ["LlamaCppLabelScorer", "log_softmax", "model_lock"]

K = TypeVar("K")


_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def model_lock(model: Any) -> Any:
    """The one re-entrant lock of a ``llama_cpp.Llama``: it holds evaluation state, so one call at a time."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(model)
        if lock is None:
            lock = _LOCKS[model] = threading.RLock()
        return lock


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Natural-log probabilities of one row of logits, shape ``(n_vocab,)`` → ``(n_vocab,)``."""
    row = np.asarray(logits, dtype=np.float64)
    shifted = row - row.max()
    return shifted - np.log(np.exp(shifted).sum())


@dataclass
class LlamaCppLabelScorer:
    """Score labels and write the explanation with a llama.cpp model.

    Args:
        llm: a LlamaIndex ``LlamaCPP`` LLM (its ``llama_cpp.Llama`` does the work).
        max_new_tokens: budget of the explanation.
        max_sentences: generation stops once this many sentences are complete.
        repeat_penalty: llama.cpp's repetition penalty for the explanation (1.1, as for transformers).
    """

    llm: Any
    max_new_tokens: int = 72
    max_sentences: int = 2
    repeat_penalty: float = 1.1

    @classmethod
    def from_llm(
        cls, llm: Any, max_new_tokens: int | None = None, max_sentences: int = 2
    ) -> LlamaCppLabelScorer | None:
        """A scorer for a LlamaIndex ``LlamaCPP`` LLM; ``None`` for other LLMs or without llama.cpp installed."""
        try:
            from llama_index.llms.llama_cpp import LlamaCPP
        except ImportError:
            return None
        if not isinstance(llm, LlamaCPP):
            return None
        penalty = float(dict(llm.generate_kwargs or {}).get("repeat_penalty", 1.1))
        return cls(llm, int(max_new_tokens or min(llm.max_new_tokens, 72)), max_sentences, penalty)

    @property
    def model(self) -> Any:
        """The ``llama_cpp.Llama`` behind the LLM."""
        return self.llm._model

    # ------------------------------------------------------------ prompt
    def render(self, messages: Sequence[Any]) -> str:
        """The prompt text: ``messages`` through the LLM's ``messages_to_prompt``, then ``Verdict:``."""
        return self.llm.messages_to_prompt(list(messages)) + ANSWER_PREFIX

    def _ids(self, text: str, first: bool = False) -> list[int]:
        return list(self.model.tokenize(text.encode("utf-8"), add_bos=first, special=True))

    def _last_logprobs(self) -> np.ndarray:
        import llama_cpp

        model = self.model
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(model.ctx, -1), shape=(model.n_vocab(),))
        return log_softmax(row)

    def _evaluate(self, ids: list[int]) -> None:
        """Evaluate ``ids`` from the first token, in llama.cpp's batches.

        Nothing held from an earlier prompt is reused: llama.cpp's kernels give a token slightly
        different values depending on where it falls in a batch (0.1 nats on the label scores), so a
        reused prefix would make a prompt's scores depend on the prompt before it.
        """
        model = self.model
        model.n_tokens = 0
        model.eval(ids)

    # ----------------------------------------------------------- scoring
    def score(self, messages: Sequence[Any]) -> tuple[LabelScores, None, list[int]]:
        """``(scores, None, prompt_ids)``: the prompt evaluated once, each label scored on it and cut off again."""
        logprobs, prompt_ids = self.score_options(messages, LABEL_STRINGS)
        return LabelScores(logprobs), None, prompt_ids

    def score_options(
        self,
        messages: Sequence[Any],
        options: Mapping[K, str],
        prefix: str = ANSWER_PREFIX,
    ) -> tuple[dict[K, float], list[int]]:
        """``({key: log-likelihood}, prompt_ids)`` of each option string after the prompt ending in ``prefix``.

        The prompt is evaluated from its first token (nothing reused from the prompt before), then each
        option token by token on top of it and cut off again: the scores of a prompt never depend on
        what was evaluated earlier.
        """
        model = self.model
        prompt_ids = self._ids(self.llm.messages_to_prompt(list(messages)) + prefix, first=True)
        if not prompt_ids:
            raise ValueError("The rendered prompt is empty.")
        self._check_room(prompt_ids)
        with model_lock(model):
            self._evaluate(prompt_ids)
            logprobs = self._options_here(prompt_ids, options)
        return logprobs, prompt_ids

    def score_after_prefix(
        self,
        prefix: str,
        prompts: Sequence[str],
        options: Mapping[K, str] = LABEL_STRINGS,  # type: ignore[assignment]
    ) -> list[dict[K, float]]:
        """Each rendered prompt (text starting with ``prefix``, e.g. one claim's stance prompts), ``ANSWER_PREFIX``
        appended, its ``options`` scored; the shared ``prefix`` is evaluated once.

        Deterministic per prompt: the prefix is evaluated from the first token at every call (the same
        tokens in the same batches), and each prompt's remainder on top of exactly that, so a prompt's
        scores depend neither on the prompts scored before it nor on the others in ``prompts``.  A prompt
        whose tokens do not start with the prefix's tokens is evaluated whole.
        """
        model = self.model
        pre = self._ids(prefix, first=True)
        out: list[dict[K, float]] = []
        with model_lock(model):
            held = False  # whether the model holds exactly the evaluated prefix (and what follows is discarded)
            for text in prompts:
                ids = self._ids(text + ANSWER_PREFIX, first=True)
                self._check_room(ids)
                if len(ids) > len(pre) and ids[: len(pre)] == pre:
                    if not held:
                        self._evaluate(pre)
                        held = True
                    model.n_tokens = len(pre)
                    model.eval(ids[len(pre) :])
                else:
                    self._evaluate(ids)
                    held = False
                out.append(self._options_here(ids, options))
        return out

    def _check_room(self, prompt_ids: list[int]) -> None:
        model = self.model
        if model.n_ctx() - len(prompt_ids) - self.max_new_tokens - 16 < 0:
            raise ValueError(
                f"The fact-check prompt has {len(prompt_ids)} tokens; with the explanation budget it does not fit "
                f"the LLM's context window of {model.n_ctx()} tokens. Pass fewer or shorter passages."
            )

    def _options_here(self, prompt_ids: list[int], options: Mapping[K, str]) -> dict[K, float]:
        """Score ``options`` after the evaluated ``prompt_ids`` (each cut off again)."""
        model = self.model
        first = self._last_logprobs()
        logprobs: dict[K, float] = {}
        for key, text in options.items():
            ids = self._ids(text)
            if not ids:
                raise ValueError(f"Option {key!r} has no tokens.")
            total = float(first[ids[0]])
            for token, following in zip(ids[:-1], ids[1:]):
                model.eval([token])
                total += float(self._last_logprobs()[following])
            model.n_tokens = len(prompt_ids)
            logprobs[key] = total
        return logprobs

    def explain(self, label: VerdictLabel, state: Any, prompt_ids: list[int]) -> str:
        """Generate the explanation after ``Verdict: <label>\\nExplanation:`` (the prompt is not evaluated again)."""
        from llama_cpp import StoppingCriteriaList

        model = self.model
        ids = prompt_ids + self._ids(LABEL_STRINGS[label] + "\nExplanation:")
        start = len(ids)

        def complete(tokens: Any, logits: Any) -> bool:
            text = model.detokenize([int(t) for t in tokens[start:]]).decode("utf-8", errors="ignore")
            return explanation_complete(text, self.max_sentences)

        with model_lock(model):  # the prompt is reused if still held, evaluated again if not
            out = model.create_completion(
                ids,
                max_tokens=self.max_new_tokens,
                temperature=0.0,
                repeat_penalty=self.repeat_penalty,
                stop=["\n\n", ANSWER_PREFIX],
                stopping_criteria=StoppingCriteriaList([complete]),
            )
        return clean_explanation(out["choices"][0]["text"])

    def verdict(
        self,
        messages: Sequence[Any],
        bias: Mapping[VerdictLabel, float] | None = None,
        decide: Callable[[LabelScores], VerdictLabel] | None = None,
    ) -> tuple[VerdictLabel, LabelScores, str]:
        """``(label, scores, explanation)`` for one prompt: the best label after ``bias`` (or ``decide(scores)``), then its explanation."""
        with model_lock(self.model):
            return score_then_explain(self, messages, bias, decide)
