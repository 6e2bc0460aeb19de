"""What scored labels are, whichever backend computes them: the label strings, their scores, the explanation's end.

Used by the one label scorer (:mod:`~llama_index_carag.verdicts.labels.label_scorer`) and by what reads
its scores (the decisions, the stance, the label prior).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from llama_index_carag.verdicts import VerdictLabel

__all__ = [
    "LABEL_STRINGS",
    "ANSWER_PREFIX",
    "LabelScores",
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

    def as_dict(self) -> dict[str, float]:
        return {k.value: round(float(v), 4) for k, v in self.logprobs.items()}


def explanation_complete(text: str, max_sentences: int) -> bool:
    """Whether a generated explanation can stop: ``max_sentences`` sentences complete, a blank line, or a new ``Verdict:``.

    ``explanation_complete("The data shows X [1]. It does not say Y.", 2)`` → ``True``.
    """
    from llama_index_carag.verdicts import answer_sentences

    if "\n\n" in text.strip() or ANSWER_PREFIX in text:
        return True
    if text.rstrip(" \"')]*")[-1:] not in (".", "!", "?"):
        return False
    return len(answer_sentences(text)) >= max_sentences


def clean_explanation(text: str) -> str:
    """The explanation part of generated text: up to a blank line or a new ``Verdict:``, stripped."""
    return text.split("\n\n")[0].split(ANSWER_PREFIX)[0].strip()
