"""The text of a model's answer: its sentences and its citations.

* :func:`answer_sentences` — the answer's sentences by the package's one sentence splitter
  (:func:`llama_index_carag.extraction.sentences.split_sentences`, pysbd), whitespace-normalised, with a
  citation written after a full stop (``… false. [2] The …``, ``… later. [3]``) kept on the sentence it closes;
* :func:`trim_explanation` — an explanation cut to its first ``max_sentences`` of those sentences;
* citations — ``[2]``, ``[1-3]``, ``Evidence 2``, ``(E2)``, literal ids … mapped to the shown passages' ids.

Both public functions are re-exported by :mod:`llama_index_carag.verdicts`.
"""

from __future__ import annotations

import re
from typing import Any

from llama_index_carag.extraction.sentences import split_sentences

__all__ = ["answer_sentences", "trim_explanation"]

# --- citations ----------------------------------------------------------------------------------
_NUM = r"(?:E\s*|#)?\d{1,6}"
_BRACKET_CITE_RE = re.compile(rf"\[\s*(?:evidence|passage|doc)?\s*{_NUM}(?:\s*(?:[,;&–-]|and)\s*{_NUM})*\s*\]", re.I)
_WORD_CITE_RE = re.compile(
    r"\b(?:evidence|passage|document|doc|source|snippet|excerpt)s?\s*(?:#|no\.?|number)?\s*\d{1,6}\b"
    r"(?:\s*(?:,|and|&|or)\s*#?\d{1,6}\b)*",
    re.I,
)
_E_CITE_RE = re.compile(r"\(\s*E\s*\d{1,6}\s*\)|\bE\d{1,6}\b")
_FIELD_NUMBERS_RE = re.compile(
    rf"[\[(\s]*(?:(?:evidence|passage|doc(?:ument)?)\s*)?{_NUM}(?:\s*(?:[,;&–-]|and)\s*{_NUM})*[\])\s.]*", re.I
)
_RANGE_RE = re.compile(r"(\d{1,6})\s*[–-]\s*(?:E\s*)?(\d{1,6})|(\d{1,6})")


def _find_citations(text: str, ids: list[str] | None) -> list[str]:
    hits: list[tuple[int, str]] = []
    for regex in (_BRACKET_CITE_RE, _WORD_CITE_RE, _E_CITE_RE):
        for m in regex.finditer(text):
            hits.extend((m.start(), i) for i in _numbers_to_ids(m.group(), ids))
    for ident in ids or []:
        if ident and not ident.isdigit():
            found = re.search(rf"(?<![\w-]){re.escape(ident)}(?![\w-])", text)
            if found:
                hits.append((found.start(), ident))
    return _unique([i for _, i in sorted(hits, key=lambda hit: hit[0])])


def _numbers_to_ids(citation: str, ids: list[str] | None) -> list[str]:
    numbers: list[int] = []
    for m in _RANGE_RE.finditer(citation):
        if m.group(3):
            numbers.append(int(m.group(3)))
        else:
            low, high = int(m.group(1)), int(m.group(2))
            numbers.extend(range(low, high + 1) if 0 <= high - low <= 20 else (low, high))
    if ids is None:
        return [str(n) for n in numbers if n >= 1]
    return [ids[n - 1] for n in numbers if 1 <= n <= len(ids)]


def _ids_from_field(value: Any, ids: list[str] | None) -> list[str]:
    items = value if isinstance(value, (list, tuple)) else [value]
    out: list[str] = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool):
            out.extend(_numbers_to_ids(str(item), ids) if 0 <= item < 10**6 else [])
        elif isinstance(item, str) and item.strip():
            s = item.strip()
            if ids and s in ids:
                found = [s]
            else:
                found = _numbers_to_ids(s, ids) if _FIELD_NUMBERS_RE.fullmatch(s) else _find_citations(s, ids)
            out.extend(found or ([s[:64]] if ids is None else []))
    return out


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --- sentences ----------------------------------------------------------------------------------
_LEADING_CITES_RE = re.compile(rf"(?:\[\s*{_NUM}(?:\s*[,;–-]\s*{_NUM})*\s*\][.,;]?\s*)+")
_ENDS_SENTENCE_RE = re.compile(r"[.!?…][\"'”’)\]*]*$")


def answer_sentences(text: str) -> list[str]:
    """The sentences of a model's answer, whitespace-normalised (empty ones dropped).

    The sentences are :func:`~llama_index_carag.extraction.sentences.split_sentences`'s; citations that open a
    sentence right after a full stop (``"It is false. [2] The vote …"``, ``"… was later. [3]"``) are moved back to
    the sentence they close when what follows them starts a sentence (or nothing does), so that trimming an
    explanation never separates a sentence from its citation.
    """
    out: list[str] = []
    for span in split_sentences(text):
        sentence = " ".join(span.text.split())
        cites = _LEADING_CITES_RE.match(sentence)
        rest = sentence[cites.end() :] if cites else sentence
        if cites and out and _ENDS_SENTENCE_RE.search(out[-1]) and (not rest or _starts_sentence(rest[0])):
            out[-1] = f"{out[-1]} {cites.group().strip()}"
            sentence = rest.strip()
        if sentence:
            out.append(sentence)
    return out


def _starts_sentence(char: str) -> bool:
    return char.isupper() or char.isdigit() or char in "\"'“‘([*_#•-"


def trim_explanation(text: str, max_sentences: int = 2) -> str:
    """The first ``max_sentences`` :func:`answer_sentences` of ``text``, joined by single spaces.

    Raises:
        ValueError: ``max_sentences < 1``.
    """
    if isinstance(max_sentences, bool) or not isinstance(max_sentences, int) or max_sentences < 1:
        raise ValueError(f"max_sentences must be an integer >= 1; got {max_sentences!r}.")
    return " ".join(answer_sentences(text)[:max_sentences]).strip()
