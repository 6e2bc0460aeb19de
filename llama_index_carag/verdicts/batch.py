"""Many claims through one :class:`~llama_index_carag.verdicts.check.ClaimChecker`: one record per claim, in order.

:func:`check_claims` is a generator: the checker (and so the model) is built once by the caller, and each
claim yields its record as soon as it is checked, so a caller can write it out at once (``carag check
--claims``).  A record is the claim's :class:`~llama_index_carag.verdicts.check.CheckResult` JSON (what
``carag check --json`` prints) with the claim's input ``line`` and ``id`` in front; a claim the checker
rejects (not a string, empty: its ``TypeError``/``ValueError``) yields an error record instead, and the
batch goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from llama_index_carag.verdicts.check import ClaimChecker

logger = logging.getLogger(__name__)

__all__ = ["BatchClaim", "check_claims", "is_error"]


class BatchClaim(NamedTuple):
    """One claim of a batch.

    Attributes:
        line: its 1-based line (``.txt``, ``.jsonl``) or data-row (``.csv``) number in the input.
        claim: the claim, as read (anything: the checker decides whether it is a claim).
        id: the input's own id for it, if it has one.
    """

    line: int
    claim: Any
    id: Any = None


def is_error(record: dict[str, Any]) -> bool:
    """Whether ``record`` (from :func:`check_claims`) is an error record rather than a result."""
    return "error" in record


def _error_record(item: BatchClaim, exc: Exception) -> dict[str, Any]:
    claim = item.claim if isinstance(item.claim, str) else repr(item.claim)
    return {"line": item.line, "id": item.id, "claim": claim, "error": f"{type(exc).__name__}: {exc}"}


def check_claims(checker: ClaimChecker, claims: Iterable[BatchClaim | Any]) -> Iterator[dict[str, Any]]:
    """Check each of ``claims`` with ``checker``, yielding one record per claim, in input order.

    Args:
        checker: the :class:`ClaimChecker` (built once: one model load for the whole batch).
        claims: :class:`BatchClaim` items, or plain claims (numbered 1, 2, … by position).

    Yields:
        ``{"line": …, "id": …, **CheckResult.to_json_dict()}`` for a checked claim, or
        ``{"line": …, "id": …, "claim": …, "error": "ValueError: …"}`` for one the checker rejects
        (``TypeError``/``ValueError``: not a string, empty); other exceptions propagate.
    """
    for position, raw in enumerate(claims, start=1):
        item = raw if isinstance(raw, BatchClaim) else BatchClaim(position, raw)
        try:
            result = checker.check(item.claim)
        except (TypeError, ValueError) as exc:
            logger.info("Claim on line %d rejected: %s", item.line, exc)
            yield _error_record(item, exc)
            continue
        yield {"line": item.line, "id": item.id, **result.to_json_dict()}
