"""The verdict data types: :class:`VerdictLabel` (the three labels, FactVer's letters), :class:`Verdict` (a parsed
answer) and :class:`PassageStance` (one passage's stance towards the claim, as the claim verifier reads it).

:class:`Verdict` and :class:`VerdictLabel` are re-exported by :mod:`llama_index_carag.verdicts`.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field

#: Key of the verdict in a synthesizer's ``Response.metadata``.
VERDICT_KEY = "verdict"


class VerdictLabel(str, Enum):
    """The three fact-checking verdicts."""

    SUPPORTED = "SUPPORTED"
    REFUTED = "REFUTED"
    NOT_ENOUGH_INFO = "NOT_ENOUGH_INFO"

    def to_fever(self) -> str:
        """FactVer's label: ``"T"`` (supported), ``"F"`` (refuted) or ``"N"`` (not enough info)."""
        return {"SUPPORTED": "T", "REFUTED": "F"}.get(self.value, "N")

    @classmethod
    def from_fever(cls, label: str) -> VerdictLabel:
        """Read ``"T"``/``"F"``/``"N"`` or a full name, case-insensitively.

        Full names: ``SUPPORTED``/``SUPPORTS``/``TRUE``, ``REFUTED``/``REFUTES``/
        ``FALSE``, ``NOT_ENOUGH_INFO``/``NOT ENOUGH INFO``/``NEI``.

        Raises:
            ValueError: anything else, including non-strings.
        """
        key = re.sub(r"[\s_-]+", "_", label.strip().upper()) if isinstance(label, str) else None
        if key not in _FEVER_NAMES:
            raise ValueError(f"Unknown verdict label {label!r}; expected T, F, N or a full label name.")
        return cls(_FEVER_NAMES[key])


_FEVER_NAMES = {
    **dict.fromkeys(("T", "TRUE", "SUPPORTED", "SUPPORTS"), "SUPPORTED"),
    **dict.fromkeys(("F", "FALSE", "REFUTED", "REFUTES"), "REFUTED"),
    **dict.fromkeys(("N", "NEI", "NOT_ENOUGH_INFO", "NOT_ENOUGH_INFORMATION"), "NOT_ENOUGH_INFO"),
}


#: The labels in their fixed order: the verifier's output columns, a passage's three probabilities (ties go to the
#: earlier one) and every count by label.
STANCE_ORDER: tuple[VerdictLabel, ...] = tuple(VerdictLabel)
#: :data:`STANCE_ORDER` as strings.
LABELS: tuple[str, ...] = tuple(label.value for label in STANCE_ORDER)


class PassageStance(BaseModel):
    """One passage's stance towards the claim, as the claim verifier reads it (its JSON is this object's)."""

    model_config = ConfigDict(frozen=True)

    number: int = Field(description="the passage's 1-based number among the evidence")
    id: str = Field(description="its node id")
    stance: VerdictLabel = Field(description="the label with the highest probability")
    score: float = Field(description="that probability (0-1)")
    probabilities: dict[str, float] = Field(default_factory=dict, description="the probability of each label")
    logprobs: dict[str, float] = Field(default_factory=dict, description="their natural logs")
    excerpt: str | None = Field(
        default=None,
        description="for a passage longer than one of the verifier's chunks, the chunk (whole sentences) its stance "
        "was read from; None when the passage was read whole",
    )


class Verdict(BaseModel):
    """A parsed verdict.

    Attributes:
        label: the verdict.
        explanation: at most ``max_sentences`` sentences, whitespace-normalised; empty only when the
            synthesizer was told not to explain (``VerdictSettings.explain``, triage).
        evidence_ids: passages the model cited, unique, in first-mention order.
        raw: the model's text, untouched.
        parsed: ``False`` when no label was found and NOT_ENOUGH_INFO is a fallback.
        method: how the label was obtained: ``"verifier"`` (the claim verifier decided; the LLM, if
            any, wrote the explanation), ``"scored"`` (label strings scored
            by a local model), ``"structured"`` (``llm.structured_predict``),
            ``"text"`` (read from free text by :func:`~llama_index_carag.verdicts.parse_verdict`) or
            ``"none"`` (no evidence, no LLM call).
        label_scores: for ``"scored"``, the log-likelihood of each label.
        cited_passages: 1-based numbers of the shown passages the explanation cites.
        invalid_citations: citation numbers the model wrote that are not among the
            shown passages; they were removed from the explanation.
        explanation_repaired: sentences contradicting the label were dropped (or,
            if none was left, a neutral sentence stands in).
        decision: the decision that picked the label (``"verifier"``; for ``"scored"``: ``"argmax"``, the
            arg-max of the LLM's label log-likelihoods).
        decision_passages: 1-based numbers of the passages the label rests on (the verifier: the strongest
            passages of the label; for NOT_ENOUGH_INFO all of them).
        decision_reason: the decision's reason in a few words.
        passage_stances: for the verifier, each passage's :class:`PassageStance`.
        confidence: for the verifier, P(the label is right): its score through a confidence map fitted on held-out
            labelled claims (:mod:`~llama_index_carag.verifier.confidence`); ``None`` when no verifier decided.
    """

    label: VerdictLabel = Field(description="SUPPORTED, REFUTED or NOT_ENOUGH_INFO")
    explanation: str = Field(description="at most max_sentences (two) sentences")
    evidence_ids: list[str] = Field(default_factory=list, description="cited passages, in first-mention order")
    raw: str = Field(description="the model's text, untouched")
    parsed: bool = Field(default=True, description="False when no label was found and NOT_ENOUGH_INFO is a fallback")
    method: str = Field(
        default="text", description="how the label was obtained: verifier, scored, structured, text or none"
    )
    label_scores: dict[str, float] | None = Field(
        default=None, description="scored labels: the log-likelihood of each label"
    )
    cited_passages: list[int] = Field(default_factory=list, description="1-based numbers of the cited passages")
    invalid_citations: list[int] = Field(
        default_factory=list, description="citation numbers not among the shown passages (removed)"
    )
    explanation_repaired: bool = Field(default=False, description="sentences contradicting the label were dropped")
    decision: str | None = Field(default=None, description="the decision that picked the label (verifier or argmax)")
    decision_passages: list[int] = Field(
        default_factory=list, description="1-based ranks of the passages the label rests on"
    )
    decision_reason: str = Field(default="", description="the decision's reason in a few words")
    passage_stances: list[PassageStance] | None = Field(
        default=None,
        description="per passage: number (rank), id, stance, score (its probability), "
        "probabilities and logprobs per label; from the verifier; None when no passage was scored",
    )
    confidence: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="P(the label is right), from a confidence map fitted on held-out claims; None when no verifier decided",
    )

    def to_fever(self) -> str:
        """The label as FactVer's ``"T"``/``"F"``/``"N"``."""
        return self.label.to_fever()


#: Words for a confidence, from the surest: (lowest confidence, words).
CONFIDENCE_WORDS = ((0.9, "very likely"), (0.7, "likely"), (0.5, "more likely than not"), (0.0, "unsure"))


def confidence_words(confidence: float | None) -> str:
    """``confidence`` in words with its percentage (``"likely, 74%"``); ``""`` for ``None``."""
    if confidence is None:
        return ""
    words = next(w for floor, w in CONFIDENCE_WORDS if confidence >= floor)
    return f"{words}, {confidence:.0%}"


#: Explanation given when the retriever found no evidence (the LLM is not called).
NO_EVIDENCE_EXPLANATION = "No evidence was retrieved for this claim, so it cannot be verified."


def no_evidence_verdict() -> Verdict:
    """The verdict when the retriever found no evidence: NOT_ENOUGH_INFO, no model called."""
    return Verdict(
        label=VerdictLabel.NOT_ENOUGH_INFO,
        explanation=NO_EVIDENCE_EXPLANATION,
        evidence_ids=[],
        raw="",
        parsed=False,
        method="none",
    )


#: The fields of a verdict given without its explanation (triage: ``explain=False``).
UNEXPLAINED = {"explanation": "", "evidence_ids": [], "cited_passages": [], "explanation_repaired": False}


def with_answer_text(verdict: Verdict) -> Verdict:
    """``verdict`` whose ``raw`` is the answer as text when the model wrote none (scored labels)."""
    if verdict.raw:
        return verdict
    label = verdict.label.value.replace("_", " ")
    return verdict.model_copy(update={"raw": f"Verdict: {label}\nExplanation: {verdict.explanation}"})


def label_value(value: Any) -> str:
    """``VerdictLabel``/``"SUPPORTED"``/``"NOT ENOUGH INFO"``/``"T"`` … → the label's value."""
    if isinstance(value, VerdictLabel):
        return value.value
    return VerdictLabel.from_fever(str(value)).value
