"""Many claims through the one claim check: a whole text's check-worthy claims, or a batch of claims; one outcome
per claim, in order, and a summary.

Every claim goes through :meth:`ClaimChecker.check <llama_index_carag.verdicts.check.ClaimChecker.check>` (or, in
``carag serve``, an async check around it), in one loop: :func:`check_each` (:func:`acheck_each` for an async
check).  A claim that is rejected (not a string, empty) or whose check fails for a known reason
(:class:`~llama_index_carag.verdicts.check.CheckFailed`: the server's timeouts, LLM errors …) does not stop the
others: it becomes a failure in the one shape of a failed claim, ``{"claim", "error": {"code", "message"}}``
(:func:`claim_failure`), with where the claim was (a text's ``start``/``end``, a batch's ``line``/``id`` or
``index``).  Python, the CLI and the HTTP API report a failed claim the same way.

A text: :func:`check_text` is the one call; :func:`find_claims` then :func:`iter_text_checks` are its two steps, so
that a caller can show progress (``carag check-text``'s bar) or stream one claim at a time.
:class:`TextCheckResult` is the JSON of ``carag check-text --json``; its JSON Schema
(:func:`text_check_result_json_schema`) is published as ``docs/schemas/text-check-result.json``.

A batch: :func:`check_claims` is a generator: the checker (and so the model) is built once by the caller, and each
claim yields its record as soon as it is checked (``carag check --claims`` writes it out at once).  A record is the
claim's :class:`~llama_index_carag.verdicts.check.CheckResult` JSON with the claim's input ``line`` and ``id`` in
front, or its failure.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias, TypeVar

from llama_index.core.bridge.pydantic import BaseModel, Field

from llama_index_carag.extraction import CheckWorthinessScorer, ExtractedClaim, extract_claims, split_sentences
from llama_index_carag.verdicts.check import CheckFailed, CheckResult, ClaimChecker, claim_rejection, failure_body
from llama_index_carag.verdicts.types import LABELS, VerdictLabel

logger = logging.getLogger(__name__)

#: Version of the :class:`TextCheckResult` layout (bumped when a field is removed or changes meaning).
#: 3: a claim whose check failed is in ``failed``, no longer counted in ``summary.claims``.
TEXT_CHECK_SCHEMA_VERSION = 3

T = TypeVar("T")
_JSON_VALUES = (str, int, float, bool, list, dict, type(None))

#: What one claim comes to: its check result, or its failure (:func:`claim_failure`).
Outcome: TypeAlias = CheckResult | dict[str, Any]


def claim_failure(claim: Any, exc: CheckFailed) -> dict[str, Any]:
    """The one shape of a failed claim: ``{"claim", "error": {"code", "message"}}`` (``claim`` as sent, or its
    ``repr`` if JSON cannot hold it), the error from :func:`~llama_index_carag.verdicts.check.failure_body`."""
    as_sent = claim if isinstance(claim, _JSON_VALUES) else repr(claim)
    return {"claim": as_sent, **failure_body(exc)}


def check_each(
    check: Callable[[T], CheckResult], items: Iterable[T], claim: Callable[[T], Any]
) -> Iterator[tuple[T, Outcome]]:
    """``(item, outcome)`` per item, in order: ``check(item)``'s result, or :func:`claim_failure` of
    ``claim(item)`` when the claim is rejected (:func:`~llama_index_carag.verdicts.check.claim_rejection`) or the
    check raises :class:`~llama_index_carag.verdicts.check.CheckFailed` (other exceptions propagate: a bug or a
    broken retriever or LLM is not one claim's failure)."""
    for item in items:
        try:
            rejected = claim_rejection(claim(item))
            if rejected is not None:
                raise rejected
            outcome: Outcome = check(item)
        except CheckFailed as exc:
            logger.info("a claim check failed: %s", exc)
            outcome = claim_failure(claim(item), exc)
        yield item, outcome


async def acheck_each(
    check: Callable[[T], Awaitable[CheckResult]], items: Iterable[T], claim: Callable[[T], Any]
) -> AsyncIterator[tuple[T, Outcome]]:
    """:func:`check_each` around an async ``check`` (``carag serve``'s: its limits, timeouts and LLM gate) that
    validates its claims itself (the server's reject one with ``invalid_request``, as ``POST /v1/check`` does)."""
    for item in items:
        try:
            outcome: Outcome = await check(item)
        except CheckFailed as exc:
            logger.info("a claim check failed: %s", exc)
            outcome = claim_failure(claim(item), exc)
        yield item, outcome


class TextCue(BaseModel):
    """A check-worthiness cue that fired on the claim's sentence."""

    name: str = Field(description="the cue's name (see llama_index_carag.extraction.CUES)")
    weight: float = Field(description="what it added to the check-worthiness score")
    matched: list[str] = Field(default_factory=list, description="the words that made it fire")


class TextClaim(BaseModel):
    """One check-worthy claim of the text: where it is, why it was kept, and its check."""

    start: int = Field(description="character offset of the claim in the text (text[start:end] is the claim)")
    end: int = Field(description="character offset just past the claim")
    text: str = Field(description="the claim, exactly as it stands in the text")
    check_worthiness: float = Field(description="the check-worthiness score that kept the sentence")
    cues: list[TextCue] = Field(description="the cues that fired")
    check: CheckResult = Field(description="the claim check: verdict (null without an LLM), SOI and evidence")

    @classmethod
    def of(cls, claim: ExtractedClaim, check: CheckResult) -> TextClaim:
        """The row of an extracted ``claim`` and its ``check``."""
        cues = [TextCue(name=h.name, weight=h.weight, matched=list(h.matched)) for h in claim.cues]
        return cls(
            start=claim.start, end=claim.end, text=claim.text, check_worthiness=claim.score, cues=cues, check=check
        )

    @property
    def label(self) -> str | None:
        """The verdict's label, or ``None`` when the claim was checked without an LLM."""
        verdict = self.check.verdict
        return None if verdict is None else VerdictLabel(verdict.label).value


class ClaimError(BaseModel):
    """Why a claim's check failed (the one error shape's inner object)."""

    code: str = Field(description="machine-readable: invalid_claim, llm_error, timeout, …")
    message: str = Field(description="for a person")


class FailedTextClaim(BaseModel):
    """A check-worthy claim of the text whose check failed: where it is, and why."""

    start: int = Field(description="character offset of the claim in the text")
    end: int = Field(description="character offset just past the claim")
    claim: str = Field(description="the claim, exactly as it stands in the text")
    error: ClaimError


TextOutcome: TypeAlias = TextClaim | FailedTextClaim


class TextCheckSummary(BaseModel):
    """How many sentences and claims the text has, how many claims got each label, and how many failed."""

    sentences: int = Field(description="sentences in the text")
    claims: int = Field(description="check-worthy claims checked")
    failed: int = Field(description="check-worthy claims whose check failed")
    labels: dict[str, int] = Field(description="claims per verdict label (every label, 0 when none)")
    without_verdict: int = Field(description="claims checked without a verdict (no LLM)")

    @classmethod
    def of(cls, sentences: int, outcomes: Sequence[TextOutcome]) -> TextCheckSummary:
        """The summary of a text's claim ``outcomes`` found among ``sentences`` sentences."""
        counts = Counter(claim.label for claim in outcomes if isinstance(claim, TextClaim))
        checked = sum(counts.values())
        return cls(
            sentences=sentences,
            claims=checked,
            failed=len(outcomes) - checked,
            labels={label: counts.get(label, 0) for label in LABELS},
            without_verdict=counts.get(None, 0),
        )


class TextCheckResult(BaseModel):
    """A text's claims, each with its span and check, and the summary (``carag check-text --json``)."""

    schema_version: int = Field(default=TEXT_CHECK_SCHEMA_VERSION, description="layout version of this object")
    text: str = Field(description="the text as received; every claim's start/end index into it")
    claims: list[TextClaim] = Field(description="the check-worthy claims checked, in the order of the text")
    failed: list[FailedTextClaim] = Field(default_factory=list, description="those whose check failed, in order")
    summary: TextCheckSummary

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (what ``carag check-text --json`` prints)."""
        return self.model_dump(mode="json")


def text_check_result_json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`TextCheckResult` (``docs/schemas/text-check-result.json``)."""
    return TextCheckResult.model_json_schema()


@dataclass(frozen=True)
class ClaimsInText:
    """The first step of a text check: the text, how many sentences it has, and its check-worthy claims."""

    text: str
    sentences: int
    claims: list[ExtractedClaim]


def find_claims(text: str, *, scorer: CheckWorthinessScorer | None = None) -> ClaimsInText:
    """The check-worthy claims of ``text`` (:func:`~llama_index_carag.extraction.extract_claims`) and its
    sentence count.

    Raises:
        TypeError: ``text`` is not a ``str`` (or the scorer is not one).
    """
    claims = extract_claims(text, scorer=scorer)
    return ClaimsInText(text, len(split_sentences(text)), claims)


def _text_outcome(claim: ExtractedClaim, outcome: Outcome) -> TextOutcome:
    if isinstance(outcome, CheckResult):
        return TextClaim.of(claim, outcome)
    return FailedTextClaim(start=claim.start, end=claim.end, **outcome)


def iter_text_checks(checker: ClaimChecker, found: ClaimsInText) -> Iterator[TextOutcome]:
    """Check each claim of ``found`` with ``checker``, yielding its :class:`TextClaim` (or
    :class:`FailedTextClaim`) as each is done."""
    for claim, outcome in check_each(lambda c: checker.check(c.text), found.claims, lambda c: c.text):
        yield _text_outcome(claim, outcome)


async def atext_checks(
    check: Callable[[str], Awaitable[CheckResult]], found: ClaimsInText
) -> AsyncIterator[TextOutcome]:
    """:func:`iter_text_checks` around an async ``check`` of a claim's text (the server's)."""
    async for claim, outcome in acheck_each(lambda c: check(c.text), found.claims, lambda c: c.text):
        yield _text_outcome(claim, outcome)


def text_check_result(found: ClaimsInText, outcomes: Sequence[TextOutcome]) -> TextCheckResult:
    """The :class:`TextCheckResult` of ``found`` and its claims' ``outcomes``."""
    return TextCheckResult(
        text=found.text,
        claims=[o for o in outcomes if isinstance(o, TextClaim)],
        failed=[o for o in outcomes if isinstance(o, FailedTextClaim)],
        summary=TextCheckSummary.of(found.sentences, outcomes),
    )


def check_text(checker: ClaimChecker, text: str, *, scorer: CheckWorthinessScorer | None = None) -> TextCheckResult:
    """Find the check-worthy claims of ``text`` and check each one with ``checker``.

    Args:
        checker: the :class:`~llama_index_carag.verdicts.check.ClaimChecker` (without a synthesizer:
            retrieval only, every claim's verdict is null).
        text: an article, transcript or post.
        scorer: decides check-worthiness (default: the offline cue rule, see
            :func:`~llama_index_carag.extraction.extract_claims`).

    Returns:
        the text, per claim its span, check-worthiness and :class:`CheckResult` (or its failure), and a summary.
    """
    found = find_claims(text, scorer=scorer)
    return text_check_result(found, list(iter_text_checks(checker, found)))


class BatchClaim(NamedTuple):
    """One claim of a batch.

    Attributes:
        line: its 1-based line (``.txt``, ``.jsonl``) or data-row (``.csv``) number in the input, or its
            1-based position in the batch.
        claim: the claim, as read (anything: the check decides whether it is a claim).
        id: the input's own id for it, if it has one.
    """

    line: int
    claim: Any
    id: Any = None


class BatchSummary(BaseModel):
    """How many claims a batch had, how many were checked and failed, and how many got each label."""

    items: int = Field(description="claims in the batch")
    checked: int = Field(description="claims checked")
    failed: int = Field(description="claims whose check failed (an error instead of a result)")
    labels: dict[str, int] = Field(description="checked claims per verdict label (every label, 0 when none)")
    without_verdict: int = Field(description="claims checked without a verdict (no LLM)")

    @classmethod
    def of(cls, outcomes: Sequence[Outcome]) -> BatchSummary:
        """The summary of a batch's ``outcomes``."""
        labels = Counter(
            None if o.verdict is None else VerdictLabel(o.verdict.label).value
            for o in outcomes
            if isinstance(o, CheckResult)
        )
        checked = sum(labels.values())
        return cls(
            items=len(outcomes),
            checked=checked,
            failed=len(outcomes) - checked,
            labels={label: labels.get(label, 0) for label in LABELS},
            without_verdict=labels.get(None, 0),
        )


def is_error(record: dict[str, Any]) -> bool:
    """Whether ``record`` (from :func:`check_claims`) is an error record rather than a result."""
    return "error" in record


def _items(claims: Iterable[BatchClaim | Any]) -> Iterator[BatchClaim]:
    for position, raw in enumerate(claims, start=1):
        yield raw if isinstance(raw, BatchClaim) else BatchClaim(position, raw)


def batch_outcomes(
    check: Callable[[BatchClaim], CheckResult], claims: Iterable[BatchClaim | Any]
) -> Iterator[tuple[BatchClaim, Outcome]]:
    """:func:`check_each` over a batch: ``claims`` are :class:`BatchClaim` items, or plain claims (numbered 1, 2,
    … by position)."""
    return check_each(check, _items(claims), lambda item: item.claim)


def abatch_outcomes(
    check: Callable[[BatchClaim], Awaitable[CheckResult]], claims: Iterable[BatchClaim | Any]
) -> AsyncIterator[tuple[BatchClaim, Outcome]]:
    """:func:`batch_outcomes` around an async ``check`` (the server's)."""
    return acheck_each(check, _items(claims), lambda item: item.claim)


def check_claims(checker: ClaimChecker, claims: Iterable[BatchClaim | Any]) -> Iterator[dict[str, Any]]:
    """Check each of ``claims`` with ``checker``, yielding one record per claim, in input order.

    Args:
        checker: the :class:`ClaimChecker` (built once: one model load for the whole batch).
        claims: :class:`BatchClaim` items, or plain claims (numbered 1, 2, … by position).

    Yields:
        ``{"line": …, "id": …, **CheckResult.to_json_dict()}`` for a checked claim, or
        ``{"line": …, "id": …, "claim": …, "error": {"code": "invalid_claim", "message": "ValueError: …"}}`` for
        one whose check fails (:func:`claim_failure`; e.g. not a string, empty); other exceptions propagate.
    """
    for item, outcome in batch_outcomes(lambda item: checker.check(item.claim), claims):
        body = outcome.to_json_dict() if isinstance(outcome, CheckResult) else outcome
        yield {"line": item.line, "id": item.id, **body}
