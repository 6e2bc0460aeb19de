"""Text as a comparison key: when two texts count as the same content."""

from __future__ import annotations

__all__ = ["normalize_text"]


def normalize_text(text: str) -> str:
    """``text`` case-folded with its whitespace collapsed: the key under which texts are compared.

    Used to recognise a query as a corpus claim, for ``dedupe`` (one passage per distinct
    text) and for annotated recall by content.
    """
    return " ".join(str(text).split()).casefold()
