"""Sentence splitting of model answers: :func:`split_sentences` and :func:`trim_to_sentences`.

Abbreviations, decimals, initials and citations after a full stop do not end a
sentence.  Both functions are re-exported by :mod:`llama_index_carag.verdicts`.
"""

from __future__ import annotations

import re

from llama_index_carag.verdicts.citations import _NUM

__all__ = ["split_sentences", "trim_to_sentences"]

_SPACES_RE = re.compile(r"\s*")
_TERMINATOR_RE = re.compile(r"[.!?…]+[\"'”’)\]*]*")
_BLOCK_SPLIT_RE = re.compile(r"\n[ \t]*\n\s*|\n(?=[ \t]*(?:[-*•]|\d{1,2}[.)])[ \t])")
_LEADING_CITES_RE = re.compile(rf"(?:\[\s*{_NUM}(?:\s*[,;–-]\s*{_NUM})*\s*\][.,;]?\s*)+")
_WORD_BEFORE_RE = re.compile(r"[A-Za-z][A-Za-z.]*$")
_ABBREVIATIONS = frozenset(
    [
        "e.g",
        "i.e",
        "u.s",
        "u.k",
        "u.n",
        "dr",
        "mr",
        "mrs",
        "ms",
        "prof",
        "sr",
        "jr",
        "st",
        "vs",
        "etc",
        "approx",
        "fig",
        "inc",
        "ltd",
        "co",
        "corp",
        "dept",
        "est",
        "cf",
        "al",
        "vol",
        "pp",
        "a.m",
        "p.m",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
    ]
)


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into whitespace-normalised sentences.

    A sentence ends at ``.``, ``!``, ``?`` or ``…`` (plus closing quotes /
    brackets / ``*``) followed by whitespace and then an upper-case letter, a
    digit, a quote, a bracket or a markdown/bullet mark, or by the end of the
    text.  Blank lines and bullet / numbered list lines also start a sentence.
    Not split: decimals (``3.5``), the abbreviations in ``_ABBREVIATIONS``
    (``e.g.``, ``U.S.``, ``Dr.``, ``vs.``, ``etc.``, ``approx.`` …), dotted short
    forms (``a.m.``), single-capital initials (``J. Smith``) and ``No.`` before a
    number.  Citations right after a full stop (``… false. [2] The …``) stay
    with the sentence before.  Empty sentences are dropped.
    """
    out: list[str] = []
    for block in _BLOCK_SPLIT_RE.split(text):
        out.extend(" ".join(s.split()) for s in _split_block(block))
    return [s for s in out if s]


def _split_block(block: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for m in _TERMINATOR_RE.finditer(block):
        end = m.end()
        if m.start() < start or (end < len(block) and not block[end].isspace()):
            continue
        spaces = _SPACES_RE.match(block, end)
        following = block[spaces.end() if spaces else end :]
        if following and not _starts_sentence(following[0]):
            continue
        if m.group().startswith(".") and _is_abbreviation(block[max(start, m.start() - 40) : m.start()], following):
            continue
        cites = _LEADING_CITES_RE.match(following)
        if cites and (not following[cites.end() :] or _starts_sentence(following[cites.end()])):
            end = len(block) - len(following) + cites.end()
        pieces.append(block[start:end])
        start = end
    pieces.append(block[start:])
    return pieces


def _starts_sentence(char: str) -> bool:
    return char.isupper() or char.isdigit() or char in "\"'“‘([*_#•-"


def _is_abbreviation(before: str, following: str) -> bool:
    word = _WORD_BEFORE_RE.search(before)
    if word is None:
        return False
    token = word.group().lower()
    if token == "no":
        return following[:1].isdigit()
    if token in _ABBREVIATIONS or (len(token) == 1 and word.group().isupper()):
        return True
    parts = token.split(".")
    return len(parts) > 1 and all(0 < len(p) <= 2 for p in parts)


def trim_to_sentences(text: str, max_sentences: int = 2) -> str:
    """The first ``max_sentences`` sentences of ``text`` (see :func:`split_sentences`), joined by single spaces.

    Raises:
        ValueError: ``max_sentences < 1``.
    """
    if isinstance(max_sentences, bool) or not isinstance(max_sentences, int) or max_sentences < 1:
        raise ValueError(f"max_sentences must be an integer >= 1; got {max_sentences!r}.")
    return " ".join(split_sentences(text)[:max_sentences]).strip()
