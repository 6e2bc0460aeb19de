"""Citations in model answers: ``[2]``, ``[1-3]``, ``Evidence 2``, ``(E2)``, literal ids … mapped to the shown passages' ids."""

from __future__ import annotations

import re
from typing import Any

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
