"""Many claims through one claim check: one outcome per claim, in order, and a summary.

:func:`check_claims` is a generator: the checker (and so the model) is built once by the caller, and each
claim yields its record as soon as it is checked, so a caller can write it out at once (``carag check
--claims``).  A record is the claim's :class:`~llama_index_carag.verdicts.check.CheckResult` JSON (what
``carag check --json`` prints) with the claim's input ``line`` and ``id`` in front; a claim whose check fails
(the checker rejects it: not a string, empty) gets an error record instead, in the one error shape
(:func:`~llama_index_carag.verdicts.check.failure_body`: ``"error": {"code", "message"}``), and the batch goes on.

The loop itself is :func:`claim_outcomes` — ``(item, CheckResult or error body)`` per claim — and
:func:`aclaim_outcomes` is the same loop around an async check (``carag serve``'s ``POST /v1/check-batch``, whose
check adds the server's limits and failures); :class:`BatchSummary` counts the outcomes.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, TypeAlias

from llama_index.core.bridge.pydantic import BaseModel, Field

from llama_index_carag.verdicts.check import CLAIM_FAILURES, CheckResult, ClaimChecker, failure_body
from llama_index_carag.verdicts.text_check import LABELS
from llama_index_carag.verdicts.types import VerdictLabel

logger = logging.getLogger(__name__)

__all__ = [
    "BatchClaim",
    "BatchSummary",
    "Outcome",
    "aclaim_outcomes",
    "check_claims",
    "claim_outcomes",
    "is_error",
]

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
