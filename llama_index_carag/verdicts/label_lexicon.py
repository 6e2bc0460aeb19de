"""The label lexicon of model answers: label words, cue patterns, and how a cue resolves to a :class:`VerdictLabel`.

A *cue kind* is ``"sup"``, ``"ref"``, ``"nei"`` or a negated one (``"not_sup"``,
``"not_ref"``, ``"not_conf"``); :func:`_resolve` maps it to a label.

Negations (decision for the ambiguous cases, applied over the whole answer):
"not supported" / "does not support" → REFUTED if the answer also contains a
refuting cue (contradicts, false …), else NOT_ENOUGH_INFO if it says the
evidence does not mention / address / lacks / is insufficient / gives no
information, else REFUTED.  "not confirmed / not verified" → REFUTED with a
refuting cue, else NOT_ENOUGH_INFO.  "not false" / "not refuted" → SUPPORTED
unless the answer has those NOT_ENOUGH_INFO cues.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from llama_index_carag.verdicts.answer_text import answer_sentences
from llama_index_carag.verdicts.types import VerdictLabel

# --- cue kinds, resolved against the whole answer by _resolve -----------------------------
_SUP, _REF, _NEI, _NOT_SUP, _NOT_REF, _NOT_CONF = "sup", "ref", "nei", "not_sup", "not_ref", "not_conf"

# Label words accepted as the *value* of a marker, JSON field or answer opening.
_VALUE_WORDS: dict[str, str] = {
    **dict.fromkeys(
        (
            "supported",
            "supports",
            "support",
            "true",
            "mostly true",
            "correct",
            "accurate",
            "yes",
            "verified",
            "confirmed",
        ),
        _SUP,
    ),
    **dict.fromkeys(
        (
            "refuted",
            "refutes",
            "refute",
            "false",
            "mostly false",
            "incorrect",
            "inaccurate",
            "contradicted",
            "contradicts",
            "misleading",
            "debunked",
            "untrue",
            "wrong",
        ),
        _REF,
    ),
    **dict.fromkeys(
        (
            "not enough info",
            "not enough information",
            "not enough evidence",
            "not enough",
            "insufficient evidence",
            "insufficient information",
            "insufficient info",
            "insufficient",
            "cannot be determined",
            "cannot be verified",
            "cannot determine",
            "undetermined",
            "unverifiable",
            "unverified",
            "inconclusive",
            "nei",
            "unknown",
            "neither",
            "uncertain",
            "unclear",
            "no information",
            "no evidence",
            "no info",
        ),
        _NEI,
    ),
    **dict.fromkeys(("not supported", "unsupported", "not true", "not correct", "not accurate", "no"), _NOT_SUP),
    **dict.fromkeys(("not refuted", "not false"), _NOT_REF),
}
_VALUE_ALT = "|".join(w.replace(" ", r"[\s_-]+") for w in sorted(_VALUE_WORDS, key=len, reverse=True))
_VALUE_RE = re.compile(rf"[\s*_\"'`\[(<]*({_VALUE_ALT})(?!\w)[\s*_\"'`\])>]*[.:;,!\-–—]*", re.I)
_LEADING_LABEL_RE = re.compile(  # a label opening the answer, then punctuation, a line break or the end
    rf"[\s*_#\"'`\[(<]*({_VALUE_ALT})(?!\w)[\s*_\"'`\])>]*(?:(?=[.:;,!\-–—\n])|\Z)", re.I
)

_NEG = r"(?:\bnot\b|n't\b|\bnever\b|\bno\b)"
_GAP = r"(?:\s+[\w-]+){0,2}?\s+"
_DOUBT = r"\b(?:do|does|did)(?:\s+not|n't)\s+(?:think|believe)\b[^.;,]{0,60}?"
_CUE_RE = re.compile(
    rf"(?P<nei>{_NEG}{_GAP}(?:support|confirm|prove)\w*\s+(?:or|nor)\s+(?:refut|contradict|disprov|den)\w*"
    rf"|{_NEG}{_GAP}(?:refut|contradict|disprov)\w*\s+(?:or|nor)\s+(?:support|confirm|prove)\w*"
    r"|\bnot\s+(?:enough|sure|clear)\b|\b(?:insufficient|unverifiable|unverified|inconclusive|unsure|unclear)\b"
    r"|\b(?:do|does|did)(?:\s+not|n't)\s+know\b"
    r"|\bNEI\b|\bno\s+(?:evidence|information|info|data|mention)\b"
    r"|\bneither\s+(?:\w+\s+)?(?:support|confirm|prov|refut|contradict|den|verif)\w*(?:\s+nor\s+\w+)?"
    r"|\b(?:cannot|can\s*not|can't|could\s*not|couldn't|unable\s+to|impossible\s+to)(?:\s+be)?\s+"
    r"(?:determin|verif|confirm|establish|assess|conclud|sa[yi]|tell|judge|know)\w*"
    r"|\b(?:does|do|did)(?:\s+not|n't)\s+provide\s+(?:enough|sufficient)\b)"
    rf"|(?P<not_conf>{_NEG}{_GAP}(?:confirm|verif|prove|corroborat)\w*)"
    rf"|(?P<not_sup>\bunsupported\b|(?:{_DOUBT}|{_NEG}{_GAP})(?:supported|supports?|true|correct|accurate|backed)\b)"
    rf"|(?P<not_ref>(?:{_DOUBT}|{_NEG}{_GAP})(?:refut\w*|false|incorrect|inaccurate|contradict\w*|disprov\w*"
    r"|debunk\w*|misleading|wrong)\b)"
    r"|(?P<ref>\b(?:refut\w*|false|incorrect|inaccurate|untrue|contradict\w*|disprov\w*|debunk\w*|misleading"
    r"|wrong|inconsistent\s+with)\b)"
    r"|(?P<sup>\b(?:supported|supports?|true|correct|accurate|confirm(?:s|ed)?|verified|corroborat\w*"
    r"|consistent\s+with|backs?\s+up|backed\s+up)\b)",
    re.I,
)
_HYPOTHETICAL_RE = re.compile(
    r"\b(?:whether|if\s+(?:the\s+claim|it|this|that)\s+(?:is|was|can)|(?:determine|check|verify|see)\s+if)\b[^,;:]*$",
    re.I,
)
_CONCESSIVE_RE = re.compile(r"\s+that\b[^.;]*?\b(?:but|however|yet|although)\b", re.I)
_NEI_CONTEXT_RE = re.compile(
    r"\b(?:does|do|did)(?:\s+not|n't)\s+(?:\w+\s+)?(?:mention|address|discuss|contain|cover|say|state|specify"
    r"|provide|include|give|refer|talk|speak|indicate)\w*|\black(?:s|ing)?\b|\binsufficient\b|\bnot\s+enough\b"
    r"|\bno\s+(?:information|evidence|mention|data|details?)\b|\bnothing\s+(?:about|on|regarding)\b"
    r"|\bsilent\s+on\b|\bnot\s+(?:mentioned|addressed|discussed|relevant)\b|\b(?:irrelevant|unrelated)\b"
    r"|\bnone\s+of\s+the\s+(?:passages|evidence|documents|sources)\b|\bno\s+(?:passage|document|source)s?\b",
    re.I,
)
_MARKER_RE = re.compile(
    r"(?<!\w)(?:(?:the|my|our)\s+)?[\"'`]?(?:final[\s_]+)?(?:verdict|label|answer|conclusion|classification"
    r"|prediction|judge?ment|decision|rating|assessment)[\"'`]?(?:\s*\([^)\n]{0,30}\))?[\s*_\"'`]*"
    r"(?:[:=]|[-–—](?!\w)|\b(?:is|would\s+be|should\s+be)\b(?:\s*:)?|(?P<eol>[ \t*_]*(?=\n)))"
    r"[ \t*_\"'`]*(?:\n[ \t*_\"'`]*)?(?=(?P<value>[^\n]{0,200}))",
    re.I,
)


def _value_kind(value: Any) -> str | None:
    """Cue kind of a label value: a bool, a label word, a FactVer letter or a short statement."""
    if isinstance(value, bool):
        return _SUP if value else _REF
    if not isinstance(value, str):
        return None
    if m := _VALUE_RE.match(value):
        return _VALUE_WORDS[" ".join(re.split(r"[\s_-]+", m.group(1).lower()))]
    if value.strip().upper() in ("T", "F", "N"):
        return {"T": _SUP, "F": _REF, "N": _NEI}[value.strip().upper()]
    cue = _first_cue(value)
    return cue[0] if cue else None


def _first_cue(text: str) -> tuple[str, str] | None:
    """The first (kind, sentence) in ``text``, skipping questions and ``whether …`` clauses."""
    for sentence in answer_sentences(text):
        if sentence.rstrip("\"'*)” ").endswith("?"):
            continue
        for m in _CUE_RE.finditer(sentence):
            if _HYPOTHETICAL_RE.search(sentence[max(0, m.start() - 200) : m.start()]):
                continue
            if m.lastgroup in (_SUP, _REF) and _CONCESSIVE_RE.match(sentence, m.end()):
                continue  # "it is true that X, but …" concedes a detail, it is not the verdict
            if m.lastgroup:
                return m.lastgroup, sentence
    return None


def _resolve(kind: str, context: str) -> VerdictLabel:
    """Map a cue kind to a label; negated cues look at the whole answer (module docstring)."""
    if kind in (_SUP, _REF, _NEI):
        return {_SUP: VerdictLabel.SUPPORTED, _REF: VerdictLabel.REFUTED}.get(kind, VerdictLabel.NOT_ENOUGH_INFO)
    refuting, nei_context = _context_cues(context)
    if kind == _NOT_REF:
        return VerdictLabel.NOT_ENOUGH_INFO if nei_context else VerdictLabel.SUPPORTED
    if refuting:
        return VerdictLabel.REFUTED
    if kind == _NOT_CONF or nei_context:
        return VerdictLabel.NOT_ENOUGH_INFO
    return VerdictLabel.REFUTED


@lru_cache(maxsize=4)
def _context_cues(context: str) -> tuple[bool, bool]:
    """(has a plain refuting cue, has a NOT_ENOUGH_INFO cue or says the evidence lacks / does not mention …)."""
    kinds = {m.lastgroup for m in _CUE_RE.finditer(context)}
    return _REF in kinds, _NEI in kinds or bool(_NEI_CONTEXT_RE.search(context))
