"""Keep an explanation true to its verdict and to the passages that were shown.

:func:`check_explanation` takes the model's explanation, the chosen label and
the number of passages in the prompt and returns an :class:`ExplanationCheck`:

* **length** — at most ``max_sentences`` sentences (:func:`~llama_index_carag.verdicts.trim_explanation`);
* **citations** — every ``[n]`` / ``[n, m]`` / ``[n-m]`` must name a shown
  passage (``1 ≤ n ≤ k``); numbers outside are removed (an emptied bracket
  disappears) and reported in ``invalid``;
* **agreement with the label** — a sentence whose own stance
  (:func:`~llama_index_carag.verdicts.sentence_stance`) contradicts the label is
  dropped: for SUPPORTED a refuting, not-supported or not-enough-info sentence;
  for REFUTED a supporting or not-enough-info one ("does not support" fits
  REFUTED); for NOT_ENOUGH_INFO a supporting or refuting one.  If no sentence is left, a neutral sentence naming the label stands in
  and ``repaired`` is set.

:func:`temper_explanation` keeps an explanation within its label's confidence: under :data:`SURE` its words of
certainty ("clearly", "definitely", "proves" …) are softened or removed, and the explanation opens with the
confidence in words ("Likely: …"; the percentage is the verdict's ``confidence``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from llama_index_carag.verdicts import Verdict, VerdictLabel, answer_sentences, sentence_stance, trim_explanation

#: Under this confidence an explanation may not sound certain (:func:`temper_explanation`).
SURE = 0.9
#: Words of certainty, and what they become under :data:`SURE` (``""``: removed).
_CERTAINTY = {
    "clearly": "",
    "definitely": "",
    "certainly": "",
    "undoubtedly": "",
    "unquestionably": "",
    "conclusively": "",
    "unequivocally": "",
    "without a doubt": "",
    "beyond doubt": "",
    "directly": "",
    "strongly": "",
    "fully": "",
    "proves": "suggests",
    "proven": "indicated",
    "prove": "suggest",
    "confirms": "suggests",
    "confirm": "suggest",
    "confirmed": "indicated",
    "establishes": "suggests",
    "established": "indicated",
    "demonstrates": "indicates",
    "demonstrated": "indicated",
    "shows": "indicates",
    "shown": "indicated",
    "supports": "appears to support",
    "refutes": "appears to refute",
    "contradicts": "appears to contradict",
}
_CERTAINTY_RE = re.compile(r"\b(" + "|".join(sorted(_CERTAINTY, key=len, reverse=True)) + r")\b(,?\s*)", re.IGNORECASE)
#: A negation anywhere before a word of certainty in its sentence: the word is kept ("does not fully support" must
#: not become "does not support", a stronger claim; "none of the passages fully supports" neither).
_NEGATION_RE = re.compile(
    r"\b(?:not|never|no|none|nobody|nothing|neither|nor|cannot|hardly|barely|without|fails?|failed|lacks?|"
    r"lacking|few|little|doubt\w*|unclear|insufficient\w*)\b|n't\b",
    re.IGNORECASE,
)

_CITE_RE = re.compile(r"\[\s*(\d{1,4}(?:\s*(?:,|;|&|and|[-–])\s*\d{1,4})*)\s*\]")
_PART_RE = re.compile(r"(\d{1,4})\s*[-–]\s*(\d{1,4})|(\d{1,4})")

#: Sentence stances that contradict each label.
CONTRADICTING_STANCES: dict[VerdictLabel, frozenset[str]] = {
    VerdictLabel.SUPPORTED: frozenset({"REFUTED", "NOT_SUPPORTED", "NOT_ENOUGH_INFO"}),
    VerdictLabel.REFUTED: frozenset({"SUPPORTED", "NOT_ENOUGH_INFO"}),
    VerdictLabel.NOT_ENOUGH_INFO: frozenset({"SUPPORTED", "REFUTED"}),
}
_FALLBACK = {
    VerdictLabel.SUPPORTED: "The passages shown support the claim.",
    VerdictLabel.REFUTED: "The passages shown contradict the claim.",
    VerdictLabel.NOT_ENOUGH_INFO: "The passages shown do not settle the claim either way.",
}


@dataclass(frozen=True)
class ExplanationCheck:
    """The checked explanation and what was changed.

    Attributes:
        text: the explanation to show (never empty).
        cited: 1-based passage numbers it cites, unique, in order of mention.
        invalid: cited numbers that were not among the shown passages (removed).
        dropped: sentences removed because they contradict the label.
        repaired: no sentence was left and a neutral one stands in.
    """

    text: str
    cited: list[int] = field(default_factory=list)
    invalid: list[int] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    repaired: bool = False


def _numbers(inside: str) -> list[int]:
    out: list[int] = []
    for m in _PART_RE.finditer(inside):
        if m.group(3):
            out.append(int(m.group(3)))
        else:
            low, high = int(m.group(1)), int(m.group(2))
            out.extend(range(low, high + 1) if 0 <= high - low <= 20 else (low, high))
    return out


def cited_numbers(text: str) -> list[int]:
    """All bracketed citation numbers in ``text`` (``[2]``, ``[1, 3]``, ``[2-4]``), unique, in order."""
    return list(dict.fromkeys(n for m in _CITE_RE.finditer(text) for n in _numbers(m.group(1))))


def _fix_citations(text: str, n_passages: int) -> tuple[str, list[int]]:
    invalid: list[int] = []

    def repl(m: re.Match[str]) -> str:
        nums = _numbers(m.group(1))
        keep = [n for n in dict.fromkeys(nums) if 1 <= n <= n_passages]
        invalid.extend(n for n in nums if not 1 <= n <= n_passages)
        return "[" + ", ".join(map(str, keep)) + "]" if keep else ""

    fixed = _CITE_RE.sub(repl, text)
    fixed = re.sub(r"\s+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", fixed)).strip()
    return fixed, list(dict.fromkeys(invalid))


def check_explanation(text: str, label: VerdictLabel, n_passages: int, *, max_sentences: int = 2) -> ExplanationCheck:
    """Trim, repair citations and drop label-contradicting sentences (module docstring).

    Raises:
        ValueError: ``n_passages < 0`` or ``max_sentences < 1``.
    """
    if n_passages < 0:
        raise ValueError("n_passages must be >= 0.")
    label = VerdictLabel(label)
    fixed, invalid = _fix_citations(str(text or ""), n_passages)
    kept: list[str] = []
    dropped: list[str] = []
    for sentence in answer_sentences(fixed):
        (dropped if sentence_stance(sentence) in CONTRADICTING_STANCES[label] else kept).append(sentence)
    body = trim_explanation(" ".join(kept), max_sentences) if kept else ""
    repaired = not body
    if repaired:
        body = _FALLBACK[label]
    return ExplanationCheck(body, cited_numbers(body), invalid, dropped, repaired)


def checked_verdict(
    label: VerdictLabel,
    explanation: str,
    evidence_ids: Sequence[str],
    *,
    raw: str,
    method: str,
    label_scores: dict[str, float] | None = None,
    max_sentences: int = 2,
) -> Verdict:
    """A :class:`Verdict` whose explanation passed :func:`check_explanation` against the shown passages.

    ``evidence_ids`` are the ids of the passages in prompt order; the verdict's
    ``evidence_ids`` are those its explanation cites.
    """
    ids = [str(i) for i in evidence_ids]
    check = check_explanation(explanation, label, len(ids), max_sentences=max_sentences)
    return Verdict(
        label=label,
        explanation=check.text,
        evidence_ids=[ids[i - 1] for i in check.cited],
        raw=raw,
        parsed=True,
        method=method,
        label_scores=label_scores,
        cited_passages=check.cited,
        invalid_citations=check.invalid,
        explanation_repaired=check.repaired or bool(check.dropped),
    )


def temper_explanation(text: str, confidence: float | None) -> str:
    """``text`` within ``confidence`` (module docstring); unchanged at :data:`SURE` or more, or without one."""
    from llama_index_carag.verdicts.types import confidence_words

    if confidence is None or confidence >= SURE or not text:
        return text

    body = re.sub(r"[ \t]+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", _soften(text)))
    body = re.sub(r",+(?=[.;:!?])", "", body)  # "true, clearly." lost its word, not its full stop
    body = re.sub(r"(^|[.!?]\s+)[.!?]+\s*", r"\1", body).strip()  # a sentence that was one removed word
    words = confidence_words(confidence).split(",")[0]
    return f"{words[0].upper()}{words[1:]}: {body}"


def _soften(text: str) -> str:
    """``text``'s words of certainty softened or removed, except after a negation; a softened word keeps its
    capital and what follows it (a comma included), a removed one takes its comma (one of a pair around it) and
    passes its sentence's capital to the next word."""
    parts: list[str] = []
    pos, capital = 0, False
    for match in _CERTAINTY_RE.finditer(text):
        gap, word, tail = text[pos : match.start()], match.group(1), match.group(2)
        pos = match.end()
        if capital and gap:
            gap, capital = _upper_first(gap), False
        if gap:
            parts.append(gap)
        before = text[: match.start()]
        if _negated(before):  # kept as written
            parts.append(_upper_first(match.group(0)) if capital else match.group(0))
            capital = False
            continue
        new = _CERTAINTY[word.lower()]
        if new:
            softened = new + tail
            parts.append(_upper_first(softened) if capital or word[0].isupper() else softened)
            capital = False
        else:  # removed: a sentence it opened starts with the next word; one comma of ", clearly," stays
            capital = capital or not before.strip() or before.rstrip()[-1] in ".!?:"
            if "," in tail and parts and parts[-1].rstrip().endswith(","):
                parts[-1] = parts[-1].rstrip()[:-1] + " "
    rest = text[pos:]
    parts.append(_upper_first(rest) if capital else rest)
    return "".join(parts)


def _negated(before: str) -> bool:
    """Whether ``before``'s last sentence holds a negation (softening there could reverse what it says)."""
    return bool(_NEGATION_RE.search(re.split(r"[.!?]\s", before)[-1]))


def _upper_first(text: str) -> str:
    stripped = text.lstrip()
    if not stripped:
        return text
    at = len(text) - len(stripped)
    return text[:at] + stripped[0].upper() + stripped[1:]
