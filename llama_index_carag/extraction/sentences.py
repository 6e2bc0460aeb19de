"""Sentences of a text with their exact character spans (pysbd, a rule-based sentence splitter).

pysbd handles abbreviations ("Dr.", "U.S."), decimals ("3.5"), quotes and ellipses; run with
``clean=False`` it returns pieces whose concatenation is the text itself, so every piece is located
in the original string and its surrounding whitespace trimmed.  A line break ends a sentence
(pysbd's own rule), so headlines and list items without a full stop stand alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SentenceSpan:
    """One sentence: ``text == source[start:end]`` (no leading or trailing whitespace)."""

    text: str
    start: int
    end: int


def _segmenter() -> Any:
    import pysbd

    # one per call: a Segmenter keeps the text it is working on (not thread-safe); building one is cheap
    return pysbd.Segmenter(language="en", clean=False, char_span=False)


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def split_sentences(text: str) -> list[SentenceSpan]:
    """The sentences of ``text`` in order, each with its exact span in ``text``.

    Whitespace-only pieces are dropped.  Text the splitter does not return (it should return all of
    it) becomes sentences of its own, so every non-whitespace character lies in exactly one sentence.
    Raises ``TypeError`` for a non-string; an empty or whitespace-only text has no sentences.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str; got {type(text).__name__}.")
    if not text.strip():
        return []
    spans: list[SentenceSpan] = []
    cursor = 0
    for piece in _segmenter().segment(text):
        core = piece.strip()
        found = text.find(core, cursor) if core else -1
        if found < 0:
            continue
        spans.extend(_gap(text, cursor, found))
        start, end = _trimmed(text, found, found + len(core))
        spans.append(SentenceSpan(text[start:end], start, end))
        cursor = end
    spans.extend(_gap(text, cursor, len(text)))
    return spans


def _gap(text: str, start: int, end: int) -> list[SentenceSpan]:
    """Text between two sentences that is not whitespace: a sentence of its own (logged)."""
    start, end = _trimmed(text, start, end)
    if start >= end:
        return []
    logger.warning("sentence splitter skipped %d characters at %d; kept as one sentence", end - start, start)
    return [SentenceSpan(text[start:end], start, end)]
