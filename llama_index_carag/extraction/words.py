"""The words of one sentence, as the check-worthiness cues read them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["SentenceWords"]

#: a dotted abbreviation ("U.S."), a number ("3.5", "40,000", "36%") or a word with inner hyphens/apostrophes ("COVID-19", "EU's")
_TOKEN = re.compile(r"(?:[^\W\d_]\.){2,}|\d+(?:[.,]\d+)*%?|[^\W_]+(?:['’\-][^\W_]+)*")
_LEADING = re.compile(r"^[\s\"'“‘(\[«—–-]*")


@dataclass(frozen=True)
class SentenceWords:
    """A sentence's text, its tokens in order (original case) and their lower-case forms."""

    text: str
    tokens: tuple[str, ...] = field(init=False)
    lower: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        leading = _LEADING.match(self.text)
        body = self.text[leading.end() :] if leading else self.text
        tokens = tuple(_TOKEN.findall(body))
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "lower", tuple(t.lower() for t in tokens))

    def has_phrase(self, phrase: str) -> bool:
        """Whether the lower-case words of ``phrase`` occur consecutively in the sentence."""
        words = tuple(phrase.split())
        n = len(words)
        return any(self.lower[i : i + n] == words for i in range(len(self.lower) - n + 1))

    def phrases(self, phrases: frozenset[str]) -> tuple[str, ...]:
        """The members of ``phrases`` (lower-case, space-separated words) found in the sentence."""
        return tuple(sorted(p for p in phrases if self.has_phrase(p)))

    @property
    def ending(self) -> str:
        """The sentence's last non-space character after closing quotes and brackets ('' if none)."""
        stripped = self.text.rstrip().rstrip("\"'”’)]»")
        return stripped[-1:] if stripped else ""
