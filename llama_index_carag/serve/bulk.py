"""Many claims in one request: ``POST /v1/check-text`` and ``POST /v1/check-batch``, streamed as Server-Sent Events.

Both run the package's one loop, :func:`~llama_index_carag.verdicts.bulk.acheck_each` (that of ``carag
check-text`` and ``carag check --claims``), around :meth:`CheckEngine.check <llama_index_carag.serve.engine.CheckEngine.check>`, the path of
``POST /v1/check``: the same ``ClaimChecker``, worker limits, LLM gate and worker pool, and its own
``request_timeout_s`` per claim.  A claim that fails (the LLM's error, a timeout, a worker restart, a bad batch
item: an :class:`~llama_index_carag.serve.errors.ApiError`) gets a ``claim_error`` event in the package's one
shape of a failed claim (``{"claim", "error": {"code", "message"}}``, with where it was), and the stream goes on.  The whole stream counts as one
request against ``max_pending``; this module adds only the HTTP side (routes, limits, events).

``/v1/check-text`` events (``index`` numbers the text's claims from 0):

1. ``claims`` — ``{"text", "sentences", "claims": [{"index", "start", "end", "text", "check_worthiness"}]}``:
   the text as checked (``text[start:end]`` is each claim) and its check-worthy claims, before any is checked;
2. per claim, in order: ``claim`` — ``{"index", **TextClaim}`` (one claim of ``carag check-text --json``:
   span, check-worthiness, cues, and its check result) — or ``claim_error`` —
   ``{"index", "start", "end", "claim", "error": {"code", "message"}}``;
3. ``summary`` — :class:`~llama_index_carag.verdicts.bulk.TextCheckSummary` (``claims``: those
   checked; ``failed``: those with ``claim_error``).

``/v1/check-batch`` events (``index`` is the item's position in ``claims``, from 0): ``result`` —
``{"index", **CheckResult}`` (what ``POST /v1/check`` returns) — or ``claim_error`` — ``{"index",
"claim", "error"}`` — per item, in order; then ``summary``, the
:class:`~llama_index_carag.verdicts.bulk.BatchSummary` ``{"items", "checked", "failed", "labels",
"without_verdict"}``.  A failure of the stream itself ends it with ``error``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.to_thread
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from llama_index_carag.serve.engine import CheckEngine
from llama_index_carag.serve.errors import ApiError
from llama_index_carag.serve.schemas import BatchRequest, TextRequest
from llama_index_carag.serve.settings import ServeSettings
from llama_index_carag.serve.sse import Events, sse_response
from llama_index_carag.verdicts.bulk import (
    BatchClaim,
    BatchSummary,
    ClaimsInText,
    Outcome,
    TextCheckSummary,
    TextClaim,
    TextOutcome,
    abatch_outcomes,
    atext_checks,
    find_claims,
    text_check_result_json_schema,
)
from llama_index_carag.verdicts.check import CheckResult, ClaimChecker, error_body

logger = logging.getLogger(__name__)

_JSON_TYPES = {bool: "boolean", int: "number", float: "number", list: "array", dict: "object", type(None): "null"}


def bulk_routes(app: FastAPI, engine: CheckEngine, settings: ServeSettings) -> None:
    """Add ``POST /v1/check-text``, ``POST /v1/check-batch`` and ``GET /v1/schema/text-check-result``."""

    @app.get("/v1/schema/text-check-result")
    def text_schema() -> dict[str, Any]:
        return text_check_result_json_schema()

    @app.post("/v1/check-text")
    async def check_text(body: TextRequest) -> StreamingResponse:
        text = engine.clean_text(body.text, "text", settings.max_text_chars)
        _admit(engine)
        found = await find_text_claims(text, settings)
        return sse_response(_guarded(text_events(engine, found)), engine)

    @app.post("/v1/check-batch")
    async def check_batch(body: BatchRequest) -> StreamingResponse:
        n = len(body.claims)
        if n == 0:
            raise ApiError(422, "invalid_request", "claims: is empty; send 1 or more claims")
        if n > settings.max_batch_claims:
            raise ApiError(
                422, "too_many_claims", f"claims: {n} items; the limit is {settings.max_batch_claims} per request"
            )
        _admit(engine)
        return sse_response(_guarded(batch_events(engine, body.claims)), engine)


def _admit(engine: CheckEngine) -> None:
    """503 now (``busy``, or ``llm_unavailable`` while no LLM worker is ready), while a status can still be sent."""
    engine.check_admission()
    if engine.synthesizer is not None:
        engine.check_llm()


async def find_text_claims(text: str, settings: ServeSettings) -> ClaimsInText:
    """The check-worthy claims of ``text`` (on a worker thread); 422 ``too_many_claims`` over ``max_text_claims``."""
    try:
        with anyio.fail_after(settings.request_timeout_s):
            found = await anyio.to_thread.run_sync(find_claims, text, abandon_on_cancel=True)
    except TimeoutError:
        raise ApiError(504, "timeout", f"finding the claims took over {settings.request_timeout_s:g} s") from None
    if len(found.claims) > settings.max_text_claims:
        raise ApiError(
            422,
            "too_many_claims",
            f"text: has {len(found.claims)} check-worthy claims; the limit is {settings.max_text_claims} "
            "per request: send a shorter text",
        )
    return found


async def _check(engine: CheckEngine, claim: str, checker: ClaimChecker) -> CheckResult:
    """``POST /v1/check``'s check of ``claim`` on ``checker`` (the one the stream started with); a bug (not an
    :class:`ApiError`) is logged and becomes ``internal_error``, the failure of this claim alone."""
    try:
        return await engine.check(claim, checker)
    except ApiError:
        raise
    except Exception as exc:
        logger.exception("a claim check failed")
        raise ApiError(500, "internal_error", "internal server error (logged)") from exc


async def text_events(engine: CheckEngine, found: ClaimsInText) -> Events:
    """The events of ``/v1/check-text`` for the claims ``found`` in a text (see the module docstring)."""
    checker = engine.checker  # every claim on the index as it was when the stream started
    yield (
        "claims",
        {
            "text": found.text,
            "sentences": found.sentences,
            "claims": [
                {"index": i, "start": c.start, "end": c.end, "text": c.text, "check_worthiness": c.score}
                for i, c in enumerate(found.claims)
            ],
        },
    )
    outcomes: list[TextOutcome] = []
    async for outcome in atext_checks(lambda text: _check(engine, text, checker), found):
        event = "claim" if isinstance(outcome, TextClaim) else "claim_error"
        yield event, {"index": len(outcomes), **outcome.model_dump(mode="json")}
        outcomes.append(outcome)
    yield "summary", TextCheckSummary.of(found.sentences, outcomes).model_dump(mode="json")


async def batch_events(engine: CheckEngine, claims: list[Any]) -> Events:
    """The events of ``/v1/check-batch`` for the request's ``claims`` (see the module docstring)."""
    checker = engine.checker  # every claim on the index as it was when the stream started

    async def check(item: BatchClaim) -> CheckResult:
        return await _check(engine, _batch_claim(engine, item.claim, item.line - 1), checker)

    outcomes: list[Outcome] = []
    async for item, outcome in abatch_outcomes(check, claims):
        outcomes.append(outcome)
        if isinstance(outcome, CheckResult):
            yield "result", {"index": item.line - 1, **outcome.to_json_dict()}
        else:
            yield "claim_error", {"index": item.line - 1, **outcome}
    yield "summary", BatchSummary.of(outcomes).model_dump(mode="json")


def _batch_claim(engine: CheckEngine, raw: Any, index: int) -> str:
    """Item ``index`` as a clean claim; 422 ``invalid_request`` if it is not a non-empty string within the limit."""
    if not isinstance(raw, str):
        kind = _JSON_TYPES.get(type(raw), type(raw).__name__)
        raise ApiError(422, "invalid_request", f"claims[{index}]: is a JSON {kind}, not a string")
    return engine.clean_text(raw, f"claims[{index}]", engine.settings.max_claim_chars)


async def _guarded(events: Events) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """``events``, ended by an ``error`` event instead of a broken stream if they raise."""
    try:
        async for item in events:
            yield item
    except Exception:
        logger.exception("stream failed")
        yield "error", error_body("internal_error", "internal server error (logged)")
