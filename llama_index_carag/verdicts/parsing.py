"""Turn an LLM's free-text fact-checking answer into a structured :class:`~llama_index_carag.verdicts.types.Verdict`.

The model is shown a claim and k numbered passages ``[1] … [k]`` and asked
whether the evidence SUPPORTS or REFUTES the claim or is NOT ENOUGH INFO, with
an explanation of at most two sentences.  Small chat models answer in many
shapes; :func:`parse_verdict` reads them in this order, the first that yields a
label wins:

1. **Clean-up** — chat-template leftovers (``<|im_start|>assistant``,
   ``<|im_end|>``, ``</s>``, ``[/INST]`` …), code fences, leading
   ``Assistant:`` / ``Answer:`` and echoed ``Claim:`` lines are removed.  When
   the prompt was echoed, only the last non-empty assistant turn is read.
2. **JSON** — the first JSON object with a label key (``verdict``, ``label``,
   ``answer`` …; case-insensitive, one level of nesting, single quotes and
   trailing commas tolerated).  Truncated JSON is read field by field.
3. **Explicit markers** — ``Verdict: REFUTED``, ``**Label** - supported``,
   ``the verdict is X``, ``Final answer: true`` and a bare label opening the
   answer (``SUPPORTED. …``, ``Yes, …``).  Markers win over prose; when two
   markers disagree the first wins and a warning is logged.
4. **Prose** — the first cue in the first sentence that has one (questions and
   ``whether …`` clauses are skipped); failing that, a sentence saying the
   evidence does not mention / address the claim means NOT_ENOUGH_INFO.

A *cue kind* is ``"sup"``, ``"ref"``, ``"nei"`` or a negated one (``"not_sup"``,
``"not_ref"``, ``"not_conf"``); :func:`_resolve` maps it to a label.

Negations (decision for the ambiguous cases, applied over the whole answer):
"not supported" / "does not support" → REFUTED if the answer also contains a
refuting cue (contradicts, false …), else NOT_ENOUGH_INFO if it says the
evidence does not mention / address / lacks / is insufficient / gives no
information, else REFUTED.  "not confirmed / not verified" → REFUTED with a
refuting cue, else NOT_ENOUGH_INFO.  "not false" / "not refuted" → SUPPORTED
unless the answer has those NOT_ENOUGH_INFO cues.

The answer's text: :func:`answer_sentences` gives its sentences by the package's one sentence splitter
(:func:`llama_index_carag.extraction.sentences.split_sentences`, pysbd), whitespace-normalised, with a citation
written after a full stop (``… false. [2] The …``) kept on the sentence it closes; :func:`trim_explanation` cuts
an explanation to its first ``max_sentences`` of them; citations (``[2]``, ``[1-3]``, ``Evidence 2``, ``(E2)``,
literal ids …) are mapped to the shown passages' ids.

:func:`parse_verdict`, :func:`sentence_stance`, :func:`answer_sentences` and :func:`trim_explanation` are
re-exported by :mod:`llama_index_carag.verdicts`, and this module logs under its own name
(``"llama_index_carag.verdicts.parsing"``): the ``carag`` command and users' logging configuration quieten the
parser's warnings by it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from llama_index_carag.extraction.sentences import split_sentences
from llama_index_carag.verdicts.types import Verdict, VerdictLabel

logger = logging.getLogger(__name__)

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


#: The public module's logger (see the module docstring), not ``__name__``.


_NO_ANSWER = "The model gave no usable answer."

# --- clean-up ---------------------------------------------------------------------------------
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_ASSISTANT_TURN_RE = re.compile(
    r"<\|im_start\|>\s*assistant\b|<\|start_header_id\|>\s*assistant\s*<\|end_header_id\|>|\[/INST\]"
    r"|<\|assistant\|>|<start_of_turn>\s*model\b",
    re.I,
)
_OTHER_TURN_RE = re.compile(
    r"<\|im_start\|>\s*(?:user|system)\b|\[INST\]|<\|start_header_id\|>\s*(?:user|system)\b|<\|(?:user|system)\|>"
    r"|<start_of_turn>\s*user\b",
    re.I,
)
_TOKEN_RE = re.compile(
    r"<\|[^|<>\n]{0,40}\|>|</?s>|<</?SYS>>|\[/?INST\]|<(?:pad|unk|eos|bos|end_of_turn|start_of_turn)>|```[\w+-]*", re.I
)
_PREFIX_RE = re.compile(
    r"\A[\s*_#>]*(?:assistant|answer|final\s+answer|response|output|a|ai|bot|model|result)\s*[*_]*\s*[:>]\s*[*_]*", re.I
)
_ECHO_RE = re.compile(  # echoed prompt lines and metadata, unless they carry the verdict
    r"^[ \t*_#>-]*(?:claim|question|confidence|score)\s*[*_]*\s*:(?![^\n]*\b(?:verdict|label|answer)\b)[^\n]*$",
    re.I | re.M,
)
_EXPLANATION_PREFIX_RE = re.compile(
    r"^[ \t>*_#•-]*(?:explanation|reason(?:ing)?|justification|rationale)[ \t*_]*(?:[:\-–—][ \t*_]*|$)",
    re.I | re.M,
)
_MARKDOWN_RE = re.compile(r"\*\*|__|`+|^[ \t]*#+[ \t]*", re.M)
_BULLET_RE = re.compile(r"\n[ \t]*(?:[-*•]|\d{1,2}[.)])[ \t]+")

# --- JSON -------------------------------------------------------------------------------------
_LABEL_KEYS = (
    "verdict",
    "label",
    "answer",
    "final_answer",
    "final_verdict",
    "prediction",
    "classification",
    "decision",
    "conclusion",
    "rating",
    "result",
    "veracity",
)
_EXPLANATION_KEYS = ("explanation", "reason", "reasoning", "justification", "rationale", "explain", "why")
_EVIDENCE_KEYS = (
    "evidence_ids",
    "evidence",
    "citations",
    "cited_evidence",
    "evidence_used",
    "sources",
    "references",
    "supporting_evidence",
)
_LOOSE_FIELD_RE = re.compile(
    r"(?P<q>[\"'])(?P<key>[A-Za-z_ ]{1,30})(?P=q)\s*:\s*(?:(?P<vq>[\"'])(?P<sval>(?:\\.|(?!(?P=vq))[^\\])*)"
    r"|(?P<lval>\[[^\]]*\]?)|(?P<bval>[\w.]+))",
    re.S,
)
_MAX_JSON_STARTS = 20


class _Reading(NamedTuple):
    label: VerdictLabel
    body: str  # text the explanation is cut from
    cue: str  # the statement that carried the label (explanation of last resort)
    cited: list[str]  # ids from a JSON evidence field


def parse_verdict(text: str | None, *, evidence_ids: Sequence[str] | None = None, max_sentences: int = 2) -> Verdict:
    """Read a verdict, an explanation and the cited passages from a model's answer.

    The reading order is in the module docstring; negated cues resolve as in
    :mod:`llama_index_carag.verdicts.parsing`.
    The explanation is the answer without the winning marker / label opening
    (or the JSON explanation field, or for prose the whole answer), stripped of
    ``Explanation:`` prefixes and markdown emphasis, whitespace-normalised and
    trimmed with :func:`~llama_index_carag.verdicts.parsing.trim_explanation`; if nothing is left, the sentence
    that carried the label; for a label-only JSON object,
    ``"The model answered <LABEL> without an explanation."``.  Citations such as
    ``[2]`` are kept in the text.

    ``evidence_ids`` lists the ids of the prompt's passages in order: citation
    number ``n`` (``[2]``, ``[1, 3]``, ``[1-3]``, ``Evidence 2``, ``evidence #3``,
    ``passage 4``, ``(E2)``, ``document 5``) becomes ``evidence_ids[n - 1]``;
    numbers out of range are ignored; non-numeric ids are also found
    literally in the text.  Without ``evidence_ids`` the numbers are returned as
    strings (``"2"``).  A JSON evidence field is read first, then the text; ids
    are unique, in first-mention order.

    If no label is found: ``NOT_ENOUGH_INFO`` with ``parsed=False``, the cleaned
    answer (or ``"The model gave no usable answer."``) as explanation, and a
    WARNING on the ``llama_index_carag.verdicts`` logger quoting the start of the text.

    Raises:
        TypeError: ``text`` is neither ``str`` nor ``None``, or ``evidence_ids`` is a single string.
        ValueError: ``max_sentences < 1``.
    """
    text, ids = _checked_input(text, evidence_ids, max_sentences)
    cleaned, reading, cited = _read_answer(text, ids)
    if reading is None:
        logger.warning("No verdict found in model output; using NOT_ENOUGH_INFO: %r", text[:80])
        explanation = _explain(cleaned, max_sentences) or _NO_ANSWER
        return Verdict(
            label=VerdictLabel.NOT_ENOUGH_INFO, explanation=explanation, evidence_ids=cited, raw=text, parsed=False
        )
    explanation = (
        _explain(reading.body, max_sentences)
        or _explain(reading.cue, max_sentences)
        or f"The model answered {reading.label.value} without an explanation."
    )
    return Verdict(label=reading.label, explanation=explanation, evidence_ids=cited, raw=text)


def _checked_input(text: Any, evidence_ids: Any, max_sentences: int) -> tuple[str, list[str] | None]:
    """``text`` (``""`` for ``None``) and the ids as strings; TypeError / ValueError as :func:`parse_verdict` documents."""
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise TypeError(f"parse_verdict expects the model's text as str or None; got {type(text).__name__}.")
    if isinstance(evidence_ids, str):
        raise TypeError("evidence_ids must be a sequence of ids, not a single string.")
    ids = None if evidence_ids is None else [str(i) for i in evidence_ids]
    trim_explanation("", max_sentences)  # validates max_sentences
    return text, ids


def _read_answer(text: str, ids: list[str] | None) -> tuple[str, _Reading | None, list[str]]:
    """(cleaned text, the reading or ``None``, cited ids) of ``text``; never raises."""
    try:
        cleaned = _clean(text)
        reading = _read_json(cleaned, ids) or _read_markers(cleaned) or _read_prose(cleaned)
        cited = _unique((reading.cited if reading else []) + _find_citations(cleaned, ids))
    except Exception:  # defensive: the parser must never take the caller down
        logger.exception("Verdict parser failed on %r", text[:80])
        cleaned, reading, cited = _CONTROL_RE.sub("", text).strip(), None, []
    return cleaned, reading, cited


def sentence_stance(sentence: str) -> str | None:
    """The label a sentence states on its own, read like prose by :func:`parse_verdict`.

    Returns ``"SUPPORTED"``, ``"REFUTED"``, ``"NOT_ENOUGH_INFO"``, ``"NOT_SUPPORTED"``
    (a negated support cue such as "does not support", which fits REFUTED or
    NOT_ENOUGH_INFO) or ``None`` when the sentence carries no label cue.
    """
    if not isinstance(sentence, str):
        raise TypeError(f"sentence_stance expects str; got {type(sentence).__name__}.")
    cue = _first_cue(_clean(sentence))
    if cue is None:
        return None
    return {
        _SUP: "SUPPORTED",
        _REF: "REFUTED",
        _NEI: "NOT_ENOUGH_INFO",
        _NOT_REF: "SUPPORTED",
        _NOT_SUP: "NOT_SUPPORTED",
        _NOT_CONF: "NOT_SUPPORTED",
    }[cue[0]]


# --- readers ----------------------------------------------------------------------------------
def _clean(text: str) -> str:
    text = _CONTROL_RE.sub("", text)
    parts = [_OTHER_TURN_RE.split(p, maxsplit=1)[0] for p in _ASSISTANT_TURN_RE.split(text)]
    parts = [p for p in (_TOKEN_RE.sub(" ", p).strip() for p in parts) if p]
    text = parts[-1] if parts else ""
    while (m := _PREFIX_RE.match(text)) and m.end() > 0:
        text = text[m.end() :]
    return _ECHO_RE.sub("", text).strip()


def _read_json(text: str, ids: list[str] | None) -> _Reading | None:
    if "{" not in text:
        return None
    for obj, start, end in _json_objects(text):
        reading = _reading_from_fields(obj, text, ids, outside=text[:start] + "\n" + text[end:])
        if reading:
            return reading
    loose: dict[str, Any] = {}
    for m in _LOOSE_FIELD_RE.finditer(text):
        value = m.group("sval") if m.group("vq") else m.group("lval") or m.group("bval")
        loose.setdefault(m.group("key"), value.replace('\\"', '"').replace("\\n", "\n"))
    return _reading_from_fields(loose, text, ids, outside="")


def _json_objects(text: str) -> list[tuple[dict[str, Any], int, int]]:
    decoder, found = json.JSONDecoder(strict=False), []
    starts = [i for i, ch in enumerate(text) if ch == "{"][:_MAX_JSON_STARTS]
    for start in starts:
        try:
            obj, end = decoder.raw_decode(text, start)
        except ValueError:
            obj, end = _lenient_json(text, start)
        if isinstance(obj, dict):
            found.append((obj, start, end))
    return found


def _lenient_json(text: str, start: int) -> tuple[Any, int]:
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            candidate = re.sub(r",\s*([}\]])", r"\1", text[start : i + 1])
            if '"' not in candidate:
                candidate = candidate.replace("'", '"')
            for python, json_literal in (("True", "true"), ("False", "false"), ("None", "null")):
                candidate = re.sub(rf"\b{python}\b", json_literal, candidate)
            try:
                return json.loads(candidate, strict=False), i + 1
            except ValueError:
                return None, start
    return None, start


def _reading_from_fields(obj: dict[str, Any], text: str, ids: list[str] | None, outside: str) -> _Reading | None:
    fields = {re.sub(r"[\s-]+", "_", str(k).strip().lower()): v for k, v in obj.items()}
    for value in list(fields.values()):  # one level of nesting
        if isinstance(value, dict):
            for k, v in value.items():
                fields.setdefault(re.sub(r"[\s-]+", "_", str(k).strip().lower()), v)
    kind = next((k for k in map(_value_kind, (fields.get(key) for key in _LABEL_KEYS)) if k), None)
    if kind is None:
        return None
    explanation = next((fields[k] for k in _EXPLANATION_KEYS if fields.get(k)), None)
    if isinstance(explanation, list):
        explanation = " ".join(map(str, explanation))
    cited = [i for k in _EVIDENCE_KEYS if k in fields for i in _ids_from_field(fields[k], ids)]
    body = explanation if isinstance(explanation, str) else outside
    return _Reading(_resolve(kind, text), body, "", cited)


def _read_markers(text: str) -> _Reading | None:
    markers: list[tuple[int, int, VerdictLabel]] = []  # (start, end of the text to drop, label)
    if lead := _LEADING_LABEL_RE.match(text):
        kind = _VALUE_WORDS[" ".join(re.split(r"[\s_-]+", lead.group(1).lower()))]
        punctuation = re.match(r"[.:;,!\-–—\s]*", text[lead.end() :])  # always matches (may be empty)
        end = lead.end() + (len(punctuation.group()) if punctuation else 0)
        markers.append((0, end, _resolve(kind, text)))
    for m in _MARKER_RE.finditer(text):
        if m.group("eol") is not None and text[text.rfind("\n", 0, m.start()) + 1 : m.start()].strip(" \t#*_>-"):
            continue  # a key alone at the end of a line counts only as a heading
        value, value_at = m.group("value") or "", m.start("value")
        word, value_kind = _VALUE_RE.match(value), _value_kind(value)
        if value_kind:
            markers.append((m.start(), value_at + (word.end() if word else 0), _resolve(value_kind, text)))
    if not markers:
        return None
    start, end, label = min(markers, key=lambda marker: marker[0])
    others = {lab.value for _, _, lab in markers} - {label.value}
    if others:
        logger.warning(
            "Model output has conflicting verdicts %s; keeping the first, %s.",
            sorted(others | {label.value}),
            label.value,
        )
    line_start = text.rfind("\n", 0, start) + 1
    line_end = len(text) if text.find("\n", start) < 0 else text.find("\n", start)
    return _Reading(label, text[:start] + "\n" + text[end:], text[line_start:line_end], [])


def _read_prose(text: str) -> _Reading | None:
    cue = _first_cue(text)
    if cue:
        return _Reading(_resolve(cue[0], text), text, cue[1], [])
    for sentence in answer_sentences(text):
        if _NEI_CONTEXT_RE.search(sentence):
            return _Reading(VerdictLabel.NOT_ENOUGH_INFO, text, sentence, [])
    return None


def _explain(text: str, max_sentences: int) -> str:
    text = _MARKDOWN_RE.sub("", _EXPLANATION_PREFIX_RE.sub("", "\n" + text))
    text = _BULLET_RE.sub("\n\n", text).lstrip(" \t\n\r.,;:!-–—")
    text = _EXPLANATION_PREFIX_RE.sub("", text)
    text = trim_explanation(text, max_sentences)
    return text[:1].upper() + text[1:]
