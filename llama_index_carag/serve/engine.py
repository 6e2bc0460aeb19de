"""The work behind the HTTP API: checks, streams, graphs and chat turns on worker threads, under limits.

Retrieval and LLM calls are blocking (local models), so each runs on a worker
thread; ``retrieval_workers`` and ``llm_workers`` bound how many run at once,
``max_pending`` bounds how many requests may wait, and ``request_timeout_s``
bounds how long one may take.  Each request runs on the checker current when it started
(:class:`~llama_index_carag.serve.reload.IndexReloader`: the index may be reloaded meanwhile).  With the LLM in
worker processes
(:mod:`~llama_index_carag.serve.llm_pool`), ``llm_gate`` answers 503 ``llm_unavailable`` before
any work while no worker is ready, and a worker dying mid-call gives the same 503.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from llama_index.core.base.response.schema import Response

from llama_index_carag.core.validation import sanitize_text
from llama_index_carag.serve.errors import ApiError
from llama_index_carag.serve.llm_pool import LLMUnavailable
from llama_index_carag.serve.reload import IndexReloader
from llama_index_carag.serve.settings import ServeSettings
from llama_index_carag.verdicts.check import CheckResult, ClaimChecker, EvidenceRow, Retrieved, error_body

logger = logging.getLogger(__name__)

T = TypeVar("T")
_END = object()


class CheckEngine:
    """Runs checks for the app.

    Args:
        checker: the :class:`~llama_index_carag.verdicts.check.ClaimChecker` (the retriever, the
            synthesizer of ``/v1/check`` (None: no verdicts) and the streaming one of ``/v1/check/stream``), or
            the :class:`~llama_index_carag.serve.reload.IndexReloader` that holds the current one.
        bot_factory: ``bot_factory(history)`` makes a ``FactCheckChatBot`` for one chat turn on the current
            checker and the session's conversation (None: no chat).
        settings: limits.
        llm_gate: raises :class:`~llama_index_carag.serve.llm_pool.LLMUnavailable` while the LLM
            cannot answer (``LLMPool.check_available``); None: always available.
    """

    def __init__(
        self,
        checker: ClaimChecker | IndexReloader,
        bot_factory: Callable[[list[tuple[str, str]]], Any] | None,
        settings: ServeSettings,
        llm_gate: Callable[[], None] | None = None,
    ) -> None:
        self.reloader = checker if isinstance(checker, IndexReloader) else IndexReloader(checker)
        first = self.reloader.current()
        self.synthesizer, self.stream_synthesizer = first.synthesizer, first.stream_synthesizer  # kept by reloads
        self.bot_factory, self.settings, self.llm_gate = bot_factory, settings, llm_gate
        self.retrieval_limiter = anyio.CapacityLimiter(settings.retrieval_workers)
        self.llm_limiter = anyio.CapacityLimiter(settings.llm_workers)
        self.pending = 0

    @property
    def checker(self) -> ClaimChecker:
        """The checker a request starting now runs on (the index as last loaded)."""
        return self.reloader.current()

    @property
    def retriever(self) -> Any:
        """The retriever of :attr:`checker`."""
        return self.reloader.current().retriever

    # ------------------------------------------------------------- admission
    def check_admission(self) -> None:
        """503 ``busy`` when ``max_pending`` requests are admitted; a request admitted may start a reload's look
        (:meth:`IndexReloader.poll`)."""
        self.reloader.poll()
        if self.pending >= self.settings.max_pending:
            raise ApiError(
                503,
                "busy",
                f"{self.settings.max_pending} requests are in progress; retry shortly",
                headers={"Retry-After": "1"},
            )

    @asynccontextmanager
    async def admitted(self, *, check: bool = True) -> AsyncIterator[None]:
        """Count one request against ``max_pending`` (503 ``busy`` beyond it, unless ``check`` is False)."""
        if check:
            self.check_admission()
        self.pending += 1
        try:
            yield
        finally:
            self.pending -= 1

    async def _run(self, limiter: anyio.CapacityLimiter, fn: Callable[..., T], *args: Any) -> T:
        async with limiter:
            return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)

    def _timeout(self) -> Any:
        return anyio.fail_after(self.settings.request_timeout_s)

    def clean_text(self, text: str, name: str, limit: int) -> str:
        """``text`` with NULs and lone surrogates removed; 422 if empty or over ``limit`` characters."""
        text = sanitize_text(text)
        if not text.strip():
            raise ApiError(422, "invalid_request", f"{name}: is empty (after removing NUL characters)")
        if len(text.strip()) > limit:
            raise ApiError(422, "invalid_request", f"{name}: is {len(text.strip())} characters; the limit is {limit}")
        return text

    def check_llm(self) -> None:
        """503 ``llm_unavailable`` (with ``Retry-After``) now, while no LLM worker is ready."""
        if self.llm_gate is not None:
            try:
                self.llm_gate()
            except LLMUnavailable as exc:
                raise _unavailable(exc) from None

    def require_llm(self, what: Any) -> Any:
        if what is None:
            raise ApiError(503, "no_llm", "this server runs without an LLM (--no-llm): verdicts and chat are off")
        return what

    # ----------------------------------------------------------------- checks
    async def retrieve(self, claim: str, checker: ClaimChecker) -> Retrieved:
        return await self._run(self.retrieval_limiter, checker.retrieve, claim)

    async def _verdict(self, retrieved: Retrieved, checker: ClaimChecker) -> Response:
        self.require_llm(self.synthesizer)
        return await self._run(self.llm_limiter, checker.verdict, retrieved)

    async def check(self, claim: str, checker: ClaimChecker | None = None) -> CheckResult:
        """Retrieval, SOI and (with a synthesizer) the verdict, on ``checker`` (default: the current one); 504
        past the timeout, 502 if the LLM fails."""
        checker = self.checker if checker is None else checker
        if self.synthesizer is not None:
            self.check_llm()
        try:
            with self._timeout():
                retrieved = await self.retrieve(claim, checker)
                response = None
                if self.synthesizer is not None:
                    response = await _llm_step(self._verdict(retrieved, checker))
                return checker.result(retrieved, response)
        except TimeoutError:
            raise ApiError(504, "timeout", f"the check took over {self.settings.request_timeout_s:g} s") from None

    async def stream(self, claim: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """``(event, data)`` pairs: ``evidence``, ``token``…, ``verdict``, ``done`` — or ``error`` last.

        The deadline is checked around each wait, never across a ``yield``.
        """
        deadline = anyio.current_time() + self.settings.request_timeout_s
        checker = self.checker
        try:
            retrieved = await _before(deadline, self.retrieve(claim, checker))
            yield "evidence", checker.result(retrieved).to_json_dict()
            response = None
            if self.stream_synthesizer is not None:
                async with self.llm_limiter:  # held for the whole generation
                    stream = checker.stream
                    response = await _before(deadline, _llm_step(self._thread(stream, retrieved)))
                    gen = response.response_gen
                    while (delta := await _before(deadline, _llm_step(self._thread(next, gen, _END)))) is not _END:
                        yield "token", {"text": delta}
            result = checker.result(retrieved, response)
            if result.verdict is not None:
                yield "verdict", result.verdict.model_dump(mode="json")
            yield "done", result.to_json_dict()
        except TimeoutError:
            yield "error", error_body("timeout", f"the check took over {self.settings.request_timeout_s:g} s")
        except ApiError as exc:
            yield "error", error_body(exc.code, exc.message)
        except Exception:
            logger.exception("stream failed")
            yield "error", error_body("internal_error", "internal server error (logged)")

    async def _thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)

    async def graph(self, claim: str) -> dict[str, Any]:
        """The SOI and its Plotly figure JSON, from the check's retrieval (the claim embedded once)."""
        try:
            with self._timeout():
                return await self._run(self.retrieval_limiter, _graph, self.checker, claim)
        except TimeoutError:
            raise ApiError(504, "timeout", f"the graph took over {self.settings.request_timeout_s:g} s") from None

    # ------------------------------------------------------------------- chat
    async def chat_turn(self, history: list[tuple[str, str]], message: str, turn: int) -> dict[str, Any]:
        """One message of a session whose conversation is ``history`` (the turn is appended to it once answered;
        a turn past its timeout leaves it as it was), on the index as last loaded; the turn as JSON."""
        self.check_llm()
        bot = self.require_llm(self.bot_factory)(list(history))  # the turn's own copy of the memory
        try:
            with self._timeout():
                answer = await _llm_step(self._run(self.llm_limiter, bot.ask, message))
        except TimeoutError:
            raise ApiError(504, "timeout", f"the answer took over {self.settings.request_timeout_s:g} s") from None
        history[:] = bot.history  # kept only for a turn answered: one abandoned at its timeout adds nothing
        stances = {st.id: st for st in answer.verdict.passage_stances or []}
        return {
            "turn": turn,
            "message": message,
            "verdict": answer.verdict.model_dump(mode="json"),
            "evidence": [
                EvidenceRow.from_node(rank, hit, stances.get(hit.node.node_id)).model_dump(mode="json")
                for rank, hit in enumerate(answer.sources, 1)
            ],
            "text": answer.text,
        }


async def _before(deadline: float, awaitable: Any) -> Any:
    with anyio.fail_at(deadline):
        return await awaitable


async def _llm_step(awaitable: Any) -> Any:
    """Await an LLM call; its failures become 502 ``llm_error`` (timeouts pass through)."""
    try:
        return await awaitable
    except (TimeoutError, anyio.get_cancelled_exc_class(), ApiError):
        raise
    except LLMUnavailable as exc:
        raise _unavailable(exc) from None
    except Exception as exc:
        logger.exception("LLM call failed")
        raise ApiError(502, "llm_error", f"the language model failed ({type(exc).__name__})") from exc


def _unavailable(exc: LLMUnavailable) -> ApiError:
    return ApiError(503, "llm_unavailable", str(exc), headers={"Retry-After": str(exc.retry_after_s)})


def _graph(checker: ClaimChecker, claim: str) -> dict[str, Any]:
    """The claim's SOI as a check result has it (with ``empty_reason``) and its figure, captioned with the reason.

    One retrieval of the check (:meth:`ClaimChecker.retrieve`: the claim embedded once, one SOI, the empty SOI's
    reason from the same vector) gives both.
    """
    import json

    from llama_index_carag.retrieval.soi_reason import REASON_KEY
    from llama_index_carag.visualize import soi_figure

    retrieved = checker.retrieve(claim)
    soi_dict = checker.result(retrieved).soi
    reason = soi_dict[REASON_KEY]
    figure = soi_figure(retrieved.soi, empty_reason=None if reason is None else reason["text"])
    return {"soi": soi_dict, "figure": json.loads(figure.to_json())}
