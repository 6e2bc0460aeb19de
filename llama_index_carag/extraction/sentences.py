"""Sentences of a text with their exact character spans (pysbd, a rule-based sentence splitter).

pysbd handles abbreviations ("Dr.", "U.S."), decimals ("3.5"), quotes and ellipses; run with
``clean=False`` it returns pieces whose concatenation is the text itself, so every piece is located
in the original string and its surrounding whitespace trimmed.  A line break ends a sentence
(pysbd's own rule), so headlines and list items without a full stop stand alone.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["SentenceSpan", "split_sentences"]


@dataclass(frozen=True)
class SentenceSpan:
    """One sentence: ``text == source[start:end]`` (no leading or trailing whitespace)."""

    text: str
    start: int
    end: int


@functools.lru_cache(maxsize=1)
def _segmenter() -> Any:
    import pysbd

    return pysbd.Segmenter(language="en", clean=False, char_span=False)


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def split_sentences(text: str) -> list[SentenceSpan]:
    """The sentences of ``text`` in order, each with its exact span in ``text``.

    Whitespace-only pieces are dropped.  Raises ``TypeError`` for a non-string; an empty or
    whitespace-only text has no sentences.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str; got {type(text).__name__}.")
    if not text.strip():
        return []
    spans: list[SentenceSpan] = []
    cursor = 0
    for piece in _segmenter().segment(text):
        core = piece.strip()
        if not core:
            continue
        found = text.find(core, cursor)
        if found < 0:  # pysbd changed the text (should not happen with clean=False)
            raise RuntimeError(f"sentence splitter returned text not found in the input: {core[:60]!r}")
        start, end = _trimmed(text, found, found + len(core))
        spans.append(SentenceSpan(text[start:end], start, end))
        cursor = end
    return spans
