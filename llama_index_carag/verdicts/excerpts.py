"""The stance excerpt: the part of a long passage its stance was read from, as prompts and readers are shown it.

The verifier reads a passage longer than one of its chunks chunk by chunk; the most decisive chunk is the
passage's ``PassageStance.excerpt`` (:meth:`~llama_index_carag.verifier.model.ClaimVerifier.readings`).
:func:`as_read` puts it in an explanation prompt in place of the passage; :func:`shown_excerpt` is the part of it
that is the passage's own text (no metadata header); :func:`shown_passage` is a passage as one line shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.verdicts.types import PassageStance


def as_read(texts: Sequence[str], stances: Sequence[PassageStance] | None) -> list[str]:
    """``texts`` as the verifier read them: a long passage as its stance's excerpt (what an explanation of the stance
    should quote), the others as given; ``texts`` unchanged when ``stances`` are not one per passage."""
    if not stances or len(stances) != len(texts):
        return list(texts)
    return [st.excerpt or text for text, st in zip(texts, stances)]


def shown_excerpt(content: str, excerpt: str | None) -> str | None:
    """The part of a stance's ``excerpt`` that is ``content``'s own text (whitespace collapsed): the excerpt less a
    leading metadata header the verifier read with the passage's first chunk; ``None`` when there is no excerpt, it
    is the whole of ``content``, or no tail of it holding at least half of its words is found in it."""
    words, text = (excerpt or "").split(), " ".join(content.split())
    for skip in range(len(words) // 2 + 1):
        part = " ".join(words[skip:])
        if part and part in text:
            return None if part == text else part
    return None


def shown_passage(text: str, excerpt: str | None) -> str:
    """A passage as a line of text shows it: its excerpt (:func:`shown_excerpt`) as ``… excerpt …`` (why its
    stance was read so), else the passage; whitespace collapsed."""
    plain, part = " ".join(text.split()), shown_excerpt(text, excerpt)
    if part is None:
        return plain
    return f"{'' if plain.startswith(part) else '… '}{part}{'' if plain.endswith(part) else ' …'}"
