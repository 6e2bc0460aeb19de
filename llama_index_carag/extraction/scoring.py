"""Check-worthiness scorers: the protocol :func:`extract_claims` calls, and the declared cue rule.

A scorer is any object with a ``threshold`` and ``score(sentences) -> list[Assessment]``: a sentence is
check-worthy when its score is at least the threshold.  :class:`CueScorer` is the offline rule; an LLM
scorer (a yes/no question answered by label log-likelihoods, ``score = P(yes)`` and ``threshold = 0.5``)
plugs into :func:`~llama_index_carag.extraction.claims.extract_claims` through its ``scorer=`` argument.

The rule (declared before any report measurement): ``score = sum of the weights of the cues that
fired`` (:data:`~llama_index_carag.extraction.cues.CUES`: +1 each for substantive (at least three
content words), number, date, named entity, comparison, measurement verb; -1 vague (at most one content
word), -5 question, -3 opinion, -2 evaluative, -3 greeting, -2 hedge), check-worthy when
``score >= RULE_THRESHOLD`` (1.0).  So a plain statement with three content words, or two and a name or
number, is check-worthy; a question needs six positive cues, an opinion or greeting four, a hedged or
evaluative statement three.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from llama_index_carag.extraction.cues import CUES, Cue, CueHit, SentenceWords

logger = logging.getLogger(__name__)

__all__ = ["Assessment", "CheckWorthinessScorer", "CueScorer", "RULE_THRESHOLD"]

#: the declared decision threshold of the cue rule
RULE_THRESHOLD = 1.0


@dataclass(frozen=True)
class Assessment:
    """A scorer's judgement of one sentence: its score and the cues behind it (may be empty)."""

    score: float
    cues: tuple[CueHit, ...] = ()


@runtime_checkable
class CheckWorthinessScorer(Protocol):
    """What :func:`extract_claims` needs: a threshold and one assessment per sentence, in order."""

    threshold: float

    def score(self, sentences: Sequence[str]) -> list[Assessment]:
        """One :class:`Assessment` per sentence; check-worthy when ``score >= threshold``."""
        ...


class CueScorer:
    """The offline rule: the sum of the weights of the cues that fire, against a threshold.

    Args:
        cues: the cues read (default: the registry :data:`~llama_index_carag.extraction.cues.CUES`).
        threshold: check-worthy when the summed weight is at least this (default :data:`RULE_THRESHOLD`).
    """

    def __init__(self, cues: Sequence[Cue] = CUES, threshold: float = RULE_THRESHOLD) -> None:
        cues = tuple(cues)
        if not cues or not all(isinstance(c, Cue) for c in cues):
            raise TypeError("cues must be a non-empty sequence of Cue objects.")
        names = [c.name for c in cues]
        if len(set(names)) != len(names):
            raise ValueError(f"cue names must be unique; got {names}.")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise TypeError(f"threshold must be a number; got {type(threshold).__name__}.")
        self.cues = cues
        self.threshold = float(threshold)

    def assess(self, sentence: str) -> Assessment:
        """The :class:`Assessment` of one sentence."""
        words = SentenceWords(sentence)
        hits = tuple(h for h in (cue.hit(words) for cue in self.cues) if h is not None)
        return Assessment(sum(h.weight for h in hits), hits)

    def score(self, sentences: Sequence[str]) -> list[Assessment]:
        """One :class:`Assessment` per sentence."""
        return [self.assess(s) for s in sentences]

    def __repr__(self) -> str:
        return f"CueScorer(cues=[{', '.join(c.name for c in self.cues)}], threshold={self.threshold:g})"
