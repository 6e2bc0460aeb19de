"""Check-worthy claims from a text: :func:`extract_claims`, the :class:`ExtractedClaim` it returns, and its scorers.

A scorer is any object with a ``threshold`` and ``score(sentences) -> list[Assessment]``
(:class:`CheckWorthinessScorer`): a sentence is check-worthy when its score is at least the threshold.
:class:`CueScorer` is the offline rule over the cue registry (:mod:`~llama_index_carag.extraction.cues`); an LLM
scorer (a yes/no question answered by label log-likelihoods) plugs in through ``scorer=``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from llama_index_carag.extraction.cues import CUES, Cue, CueHit, SentenceWords
from llama_index_carag.extraction.sentences import split_sentences

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExtractedClaim:
    """A check-worthy sentence: ``source[start:end] == text``, its score and the cues that fired."""

    text: str
    start: int
    end: int
    score: float
    cues: tuple[CueHit, ...] = ()

    @property
    def explanation(self) -> str:
        """The cues in words, e.g. ``"substantive +1 (...); number +1 (2020)"`` ('' for a scorer without cues)."""
        return "; ".join(hit.describe() for hit in self.cues)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: text, start, end, score and the cues (name, weight, matched words)."""
        return {
            "text": self.text,
            "start": self.start,
            "end": self.end,
            "score": self.score,
            "cues": [{"name": h.name, "weight": h.weight, "matched": list(h.matched)} for h in self.cues],
        }


def extract_claims(text: str, *, scorer: CheckWorthinessScorer | None = None) -> list[ExtractedClaim]:
    """The check-worthy sentences of ``text``, in order, each with its exact span.

    Args:
        text: an article, transcript or post.
        scorer: decides check-worthiness (default :class:`CueScorer`, the offline cue rule); any
            object with ``threshold`` and ``score(sentences)`` (:class:`CheckWorthinessScorer`).

    Returns:
        one :class:`ExtractedClaim` per sentence whose score is at least ``scorer.threshold``, with
        ``text[claim.start:claim.end] == claim.text``.  An empty or whitespace-only text gives ``[]``.

    Raises:
        TypeError: ``text`` is not a ``str``, or ``scorer`` lacks ``threshold`` or ``score``.
        ValueError: the scorer returned a different number of assessments than sentences.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str; got {type(text).__name__}.")
    scorer = CueScorer() if scorer is None else scorer
    if not isinstance(scorer, CheckWorthinessScorer):
        raise TypeError(f"scorer must have `threshold` and `score(sentences)`; got {type(scorer).__name__}.")
    spans = split_sentences(text)
    if not spans:
        return []
    assessments = scorer.score([s.text for s in spans])
    if len(assessments) != len(spans):
        raise ValueError(f"scorer returned {len(assessments)} assessments for {len(spans)} sentences.")
    claims = [
        ExtractedClaim(span.text, span.start, span.end, float(a.score), tuple(a.cues))
        for span, a in zip(spans, assessments)
        if a.score >= scorer.threshold
    ]
    logger.debug("%d of %d sentences are check-worthy", len(claims), len(spans))
    return claims


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
