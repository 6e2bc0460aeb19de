"""Check-worthy claims from a text: :func:`extract_claims` and the :class:`ExtractedClaim` it returns."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from llama_index_carag.extraction.cues import CueHit
from llama_index_carag.extraction.scoring import CheckWorthinessScorer, CueScorer
from llama_index_carag.extraction.sentences import split_sentences

logger = logging.getLogger(__name__)

__all__ = ["ExtractedClaim", "extract_claims"]


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
