"""Many claims through the one claim check: a whole text's check-worthy claims, or a batch of claims; one outcome
per claim, in order, and a summary.

A text: :func:`check_text` is the one call; :func:`find_claims` then :func:`iter_text_checks` are its two steps, so
that a caller can show progress (``carag check-text``'s bar) or stream one claim at a time.  Every claim
goes through :meth:`ClaimChecker.check <llama_index_carag.verdicts.check.ClaimChecker.check>`: a text
check is the claim checks of its claims, with their spans.  :func:`atext_outcomes` is the same loop around an
async check (``carag serve``'s ``POST /v1/check-text``), a failed claim giving its error body (the one error
shape, :func:`~llama_index_carag.verdicts.check.failure_body`) and the text going on.

:class:`TextCheckResult` is the JSON of ``carag check-text --json``; its JSON Schema
(:func:`text_check_result_json_schema`) is published as ``docs/schemas/text-check-result.json``.

A batch: :func:`check_claims` is a generator: the checker (and so the model) is built once by the caller, and each
claim yields its record as soon as it is checked (``carag check --claims`` writes it out at once).  A record is the
claim's :class:`~llama_index_carag.verdicts.check.CheckResult` JSON with the claim's input ``line`` and ``id`` in
front; a claim whose check fails gets an error record in the one error shape
(:func:`~llama_index_carag.verdicts.check.failure_body`), and the batch goes on.  The loop itself is
:func:`claim_outcomes` (:func:`aclaim_outcomes` around an async check, ``carag serve``'s ``POST /v1/check-batch``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

from llama_index.core.bridge.pydantic import BaseModel, Field

from llama_index_carag.extraction import CheckWorthinessScorer, ExtractedClaim, extract_claims, split_sentences
from llama_index_carag.verdicts.check import CLAIM_FAILURES, CheckResult, ClaimChecker, failure_body
from llama_index_carag.verdicts.types import LABELS, VerdictLabel

logger = logging.getLogger(__name__)

#: Version of the :class:`TextCheckResult` layout (bumped when a field is removed or changes meaning).
#: 2: its claims' checks are :class:`CheckResult` 3 (the archive decision's refutation cues are gone).
TEXT_CHECK_SCHEMA_VERSION = 2


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


class TextCheckSummary(BaseModel):
    """How many sentences and claims the text has, and how many claims got each label."""

    sentences: int = Field(description="sentences in the text")
    claims: int = Field(description="check-worthy claims found (and checked)")
    labels: dict[str, int] = Field(description="claims per verdict label (every label, 0 when none)")
    without_verdict: int = Field(description="claims checked without a verdict (no LLM)")

    @classmethod
    def of(cls, sentences: int, claims: Sequence[TextClaim]) -> TextCheckSummary:
        """The summary of ``claims`` found among ``sentences`` sentences."""
        counts = Counter(claim.label for claim in claims)
        return cls(
            sentences=sentences,
            claims=len(claims),
            labels={label: counts.get(label, 0) for label in LABELS},
            without_verdict=counts.get(None, 0),
        )


class TextCheckResult(BaseModel):
    """A text's claims, each with its span and check, and the summary (``carag check-text --json``)."""

    schema_version: int = Field(default=TEXT_CHECK_SCHEMA_VERSION, description="layout version of this object")
    text: str = Field(description="the text as received; every claim's start/end index into it")
    claims: list[TextClaim] = Field(description="the check-worthy claims, in the order of the text")
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


def iter_text_checks(checker: ClaimChecker, found: ClaimsInText) -> Iterator[TextClaim]:
    """Check each claim of ``found`` with ``checker``, yielding one :class:`TextClaim` as each is done."""
    for claim in found.claims:
        logger.debug("checking claim at %d-%d", claim.start, claim.end)
        yield TextClaim.of(claim, checker.check(claim.text))


async def atext_outcomes(
    check: Callable[[str], Awaitable[CheckResult]], found: ClaimsInText
) -> AsyncIterator[tuple[int, ExtractedClaim, TextClaim | dict[str, Any]]]:
    """:func:`iter_text_checks` around an async ``check`` (the server's): ``(index, claim, outcome)`` per claim of
    ``found``, the outcome its :class:`TextClaim` or the error body of its failure
    (:data:`~llama_index_carag.verdicts.check.CLAIM_FAILURES`; other exceptions propagate)."""
    for index, claim in enumerate(found.claims):
        try:
            outcome: TextClaim | dict[str, Any] = TextClaim.of(claim, await check(claim.text))
        except CLAIM_FAILURES as exc:
            logger.info("claim at %d-%d failed: %s", claim.start, claim.end, exc)
            outcome = failure_body(exc)
        yield index, claim, outcome


def text_check_result(found: ClaimsInText, checked: Sequence[TextClaim]) -> TextCheckResult:
    """The :class:`TextCheckResult` of ``found`` and its ``checked`` claims."""
    return TextCheckResult(text=found.text, claims=list(checked), summary=TextCheckSummary.of(found.sentences, checked))


def check_text(checker: ClaimChecker, text: str, *, scorer: CheckWorthinessScorer | None = None) -> TextCheckResult:
    """Find the check-worthy claims of ``text`` and check each one with ``checker``.

    Args:
        checker: the :class:`~llama_index_carag.verdicts.check.ClaimChecker` (without a synthesizer:
            retrieval only, every claim's verdict is null).
        text: an article, transcript or post.
        scorer: decides check-worthiness (default: the offline cue rule, see
            :func:`~llama_index_carag.extraction.extract_claims`).

    Returns:
        the text, per claim its span, check-worthiness and :class:`CheckResult`, and a summary.
    """
    found = find_claims(text, scorer=scorer)
    return text_check_result(found, list(iter_text_checks(checker, found)))


#: What one claim of a batch comes to: its check result, or the error body of its failure.
Outcome: TypeAlias = CheckResult | dict[str, Any]


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


def _failed(item: BatchClaim, exc: Exception) -> dict[str, Any]:
    logger.info("Claim on line %d failed: %s", item.line, exc)
    return failure_body(exc)


def claim_outcomes(
    check: Callable[[BatchClaim], CheckResult], claims: Iterable[BatchClaim | Any]
) -> Iterator[tuple[BatchClaim, Outcome]]:
    """``(item, outcome)`` per claim, in input order: ``check(item)``'s result, or the error body of its
    failure (:data:`~llama_index_carag.verdicts.check.CLAIM_FAILURES`; other exceptions propagate).

    ``claims`` are :class:`BatchClaim` items, or plain claims (numbered 1, 2, … by position).
    """
    for item in _items(claims):
        try:
            outcome: Outcome = check(item)
        except CLAIM_FAILURES as exc:
            outcome = _failed(item, exc)
        yield item, outcome


async def aclaim_outcomes(
    check: Callable[[BatchClaim], Awaitable[CheckResult]], claims: Iterable[BatchClaim | Any]
) -> AsyncIterator[tuple[BatchClaim, Outcome]]:
    """:func:`claim_outcomes` around an async ``check`` (the server's: its limits, timeouts and LLM gate)."""
    for item in _items(claims):
        try:
            outcome: Outcome = await check(item)
        except CLAIM_FAILURES as exc:
            outcome = _failed(item, exc)
        yield item, outcome


def check_claims(checker: ClaimChecker, claims: Iterable[BatchClaim | Any]) -> Iterator[dict[str, Any]]:
    """Check each of ``claims`` with ``checker``, yielding one record per claim, in input order.

    Args:
        checker: the :class:`ClaimChecker` (built once: one model load for the whole batch).
        claims: :class:`BatchClaim` items, or plain claims (numbered 1, 2, … by position).

    Yields:
        ``{"line": …, "id": …, **CheckResult.to_json_dict()}`` for a checked claim, or
        ``{"line": …, "id": …, "claim": …, "error": {"code": "invalid_claim", "message": "ValueError: …"}}`` for
        one the checker rejects (``TypeError``/``ValueError``: not a string, empty); other exceptions propagate.
    """
    for item, outcome in claim_outcomes(lambda item: checker.check(item.claim), claims):
        if isinstance(outcome, CheckResult):
            yield {"line": item.line, "id": item.id, **outcome.to_json_dict()}
        else:
            claim = item.claim if isinstance(item.claim, str) else repr(item.claim)
            yield {"line": item.line, "id": item.id, "claim": claim, **outcome}
