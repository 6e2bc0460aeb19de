"""What scored labels are, whichever backend computes them: the label strings, their scores, the scorer protocol.

Shared by :mod:`~llama_index_carag.verdicts.labels.scoring` (transformers, and :func:`~llama_index_carag.verdicts.labels.scoring.scorer_for`)
and :mod:`~llama_index_carag.verdicts.labels.scoring_llamacpp` (llama.cpp).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from llama_index_carag.verdicts import VerdictLabel

__all__ = [
    "LABEL_STRINGS",
    "ANSWER_PREFIX",
    "LabelScores",
    "LabelScorer",
    "score_then_explain",
    "explanation_complete",
    "clean_explanation",
]

#: The text each label is scored as, after ``Verdict:``.
LABEL_STRINGS: dict[VerdictLabel, str] = {
    VerdictLabel.SUPPORTED: " SUPPORTED",
    VerdictLabel.REFUTED: " REFUTED",
    VerdictLabel.NOT_ENOUGH_INFO: " NOT ENOUGH INFO",
}
#: The assistant turn opens with this; the label strings follow it.
ANSWER_PREFIX = "Verdict:"


@dataclass(frozen=True)
class LabelScores:
    """Log-likelihoods of the three label strings after the prompt (natural log, summed over tokens)."""

    logprobs: Mapping[VerdictLabel, float]

    def probabilities(self) -> dict[VerdictLabel, float]:
        """The three log-likelihoods normalised to sum to 1 (a softmax over the labels)."""
        top = max(self.logprobs.values())
        weights = {k: math.exp(v - top) for k, v in self.logprobs.items()}
        total = sum(weights.values())
        return {k: w / total for k, w in weights.items()}

    def best(self, bias: Mapping[VerdictLabel, float] | None = None) -> VerdictLabel:
        """The label with the highest log-likelihood plus its ``bias`` (ties: SUPPORTED, REFUTED, NEI order)."""
        bias = bias or {}
        return max(LABEL_STRINGS, key=lambda k: self.logprobs[k] + float(bias.get(k, 0.0)))

    def as_dict(self) -> dict[str, float]:
        return {k.value: round(float(v), 4) for k, v in self.logprobs.items()}


class LabelScorer(Protocol):
    """What ``"score"`` mode needs from a local LLM: label log-likelihoods, then an explanation for a label.

    Implemented by :class:`HFLabelScorer` (transformers) and
    :class:`~llama_index_carag.verdicts.labels.scoring_llamacpp.LlamaCppLabelScorer` (llama.cpp).
    """

    def score(self, messages: Sequence[Any]) -> tuple[LabelScores, Any, list[int]]:
        """``(scores, state, prompt_ids)``: the three labels scored after the rendered prompt."""

    def explain(self, label: VerdictLabel, state: Any, prompt_ids: list[int]) -> str:
        """The explanation generated after ``Verdict: <label>\\nExplanation:`` (``state`` from :meth:`score`)."""

    def verdict(
        self,
        messages: Sequence[Any],
        bias: Mapping[VerdictLabel, float] | None = None,
        decide: Callable[[LabelScores], VerdictLabel] | None = None,
    ) -> tuple[VerdictLabel, LabelScores, str]:
        """``(label, scores, explanation)``: the best label after ``bias`` (or ``decide(scores)``), then its explanation."""


def score_then_explain(
    scorer: LabelScorer,
    messages: Sequence[Any],
    bias: Mapping[VerdictLabel, float] | None = None,
    decide: Callable[[LabelScores], VerdictLabel] | None = None,
) -> tuple[VerdictLabel, LabelScores, str]:
    """``LabelScorer.verdict`` for any scorer: score the labels, pick one (``decide(scores)``, else the best after
    ``bias``), then explain it on the same prompt state."""
    scores, state, prompt_ids = scorer.score(messages)
    label = decide(scores) if decide is not None else scores.best(bias)
    return label, scores, scorer.explain(label, state, prompt_ids)


def explanation_complete(text: str, max_sentences: int) -> bool:
    """Whether a generated explanation can stop: ``max_sentences`` sentences complete, a blank line, or a new ``Verdict:``.

    ``explanation_complete("The data shows X [1]. It does not say Y.", 2)`` → ``True``.
    """
    from llama_index_carag.verdicts import split_sentences

    if "\n\n" in text.strip() or ANSWER_PREFIX in text:
        return True
    if text.rstrip(" \"')]*")[-1:] not in (".", "!", "?"):
        return False
    return len(split_sentences(text)) >= max_sentences


def clean_explanation(text: str) -> str:
    """The explanation part of generated text: up to a blank line or a new ``Verdict:``, stripped."""
    return text.split("\n\n")[0].split(ANSWER_PREFIX)[0].strip()
