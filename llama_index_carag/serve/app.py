"""``create_app``: the FastAPI application of ``carag serve``.

Endpoints (JSON unless noted; every error is ``{"error": {"code", "message"}}``, see :mod:`.errors`).  With a
token (:mod:`.access`) every one but ``/healthz`` and ``/login`` answers 401 without it:

* ``GET /`` — the chat page (self-contained: its own JS/CSS and plotly.js from the ``plotly`` package).
* ``GET /healthz`` — ``{"status": "ok"}``.
* ``GET /v1/info`` — version, schema version, retrieval mode, k, index size, LLM name, limits,
  ``llm_state`` (the LLM worker processes: ``{"workers": [{"pid", "state", "restarts", "busy"}]}``) and
  ``index`` (the copy served: ``{"folder", "loaded_at", "reloads", "reload_interval_s", "reloading", "behind",
  "last_error"}``, :mod:`.reload`).
* ``GET /v1/schema/check-result`` — JSON Schema of the check result.
* ``GET /openapi.json`` — the OpenAPI description (no ``/docs``: Swagger UI would need a CDN).
* ``POST /v1/check`` ``{"claim"}`` — a :class:`~llama_index_carag.verdicts.check.CheckResult` (``carag check --json``).
* ``POST /v1/check/stream`` ``{"claim"}`` — Server-Sent Events: ``evidence`` (the result without the
  verdict), ``token`` ``{"text"}`` per piece of the model's answer, ``verdict``, ``done`` (the full result);
  or ``error`` ``{"error": …}`` as the last event.
* ``POST /v1/check-text`` ``{"text"}`` — Server-Sent Events: ``claims`` (the check-worthy claims found,
  with their spans), one ``claim`` (or ``claim_error``) per claim as it is checked, ``summary``
  (:mod:`.bulk`).
* ``POST /v1/check-batch`` ``{"claims": [...]}`` — Server-Sent Events: one ``result`` (the
  ``/v1/check`` result) or ``claim_error`` per claim, in order, then ``summary`` (:mod:`.bulk`).
* ``GET /v1/schema/text-check-result`` — JSON Schema of ``carag check-text --json``.
* ``POST /v1/graph`` ``{"claim"}`` — the SOI and its Plotly figure.
* ``POST /v1/sessions`` — a chat session; ``GET``/``DELETE /v1/sessions/{id}``;
  ``POST /v1/sessions/{id}/messages`` ``{"message"}`` — one turn (verdict, evidence, the model's text).

The page's static files ship in this package (``serve/static``); plotly.js comes from the installed ``plotly``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, Response, StreamingResponse

from llama_index_carag.serve.access import AccessMiddleware
from llama_index_carag.serve.bulk import bulk_routes
from llama_index_carag.serve.engine import CheckEngine
from llama_index_carag.serve.errors import ApiError, BodyLimitMiddleware, install_error_handlers
from llama_index_carag.serve.reload import IndexReloader
from llama_index_carag.serve.schemas import (
    ChatTurnOut,
    ClaimRequest,
    GraphOut,
    InfoOut,
    MessageRequest,
    SessionInfo,
    SessionOut,
)
from llama_index_carag.serve.sessions import SessionStore
from llama_index_carag.serve.settings import ServeSettings
from llama_index_carag.serve.sse import sse_response
from llama_index_carag.verdicts.check import CHECK_SCHEMA_VERSION, CheckResult, ClaimChecker, check_result_json_schema

logger = logging.getLogger(__name__)


def create_app(
    retriever: Any,
    synthesizer: Any | None = None,
    *,
    stream_synthesizer: Any | None = None,
    llm: Any | None = None,
    settings: ServeSettings | None = None,
    clock: Callable[[], float] | None = None,
    llm_pool: Any | None = None,
    token: str | None = None,
    reload_index: Callable[[Any], Any] | None = None,
) -> FastAPI:
    """The HTTP API and chat page over one retriever.

    Args:
        retriever: a fitted ``ContextAwareRetriever`` (e.g. ``from_persist_dir``).
        synthesizer: a ``FactCheckSynthesizer`` for verdicts; ``None`` serves retrieval only
            (``verdict`` is null, chat answers 503 ``no_llm``).
        stream_synthesizer: a ``FactCheckSynthesizer(streaming=True)`` for ``/v1/check/stream``;
            without one the stream sends ``evidence`` and ``done`` only.
        llm: the LLM of the chat sessions (a ``FactCheckChatBot`` each, on the same checks: it condenses
            follow-ups; ``None``: no chat); its ``metadata.model_name`` is shown by ``/v1/info``.
        settings: limits and timeouts (:class:`ServeSettings`).
        clock: monotonic seconds for session expiry (tests).
        llm_pool: a started :class:`~llama_index_carag.serve.llm_pool.LLMPool`: verdicts and chat turns
            run in its worker processes (leave ``synthesizer``, ``stream_synthesizer`` and ``llm`` None);
            while no worker is ready they get 503 ``llm_unavailable``; chat sessions stay here.
        token: the access token every path but ``/healthz`` and ``/login`` needs (:mod:`.access`); ``None``: open.
        reload_index: ``reload_index(served retriever)`` loads the index again when another process changed it
            (checked at most every ``settings.reload_interval_s`` on requests: :mod:`.reload`); ``None``: the
            retriever's own ``reloaded()`` (its folder loaded again, its settings, scorers and callbacks kept),
            or no reload where it cannot be reloaded so (``reload_blocker()`` says why, logged).
    """
    settings = settings or ServeSettings()
    if llm_pool is not None:
        synthesizer, stream_synthesizer, llm = _remote(llm_pool, synthesizer, stream_synthesizer, llm)
    if reload_index is None:
        reload_index = _default_reload(retriever)
    reloader = IndexReloader(
        ClaimChecker(retriever, synthesizer, stream_synthesizer), reload_index, settings.reload_interval_s
    )
    engine = CheckEngine(
        reloader,
        None if llm is None else _bot_factory(reloader.current, llm),
        settings,
        llm_gate=None if llm_pool is None else llm_pool.check_available,
    )
    sessions = SessionStore(settings.max_sessions, settings.session_ttl_s, **({"clock": clock} if clock else {}))
    # No /docs: Swagger UI loads from a CDN; the OpenAPI JSON stays at /openapi.json.
    app = FastAPI(title="llama-index-carag", version=_version(), docs_url=None, redoc_url=None)
    app.state.engine, app.state.sessions, app.state.settings = engine, sessions, settings
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    _security_headers(app)
    app.add_middleware(AccessMiddleware, token=token, max_client_requests=settings.max_client_requests)  # outermost
    app.include_router(page_router())
    _api_routes(
        app,
        engine,
        sessions,
        settings,
        llm_name=_llm_name(llm, synthesizer),
        llm_state=None if llm_pool is None else llm_pool.state,
    )
    return app


def _default_reload(retriever: Any) -> Callable[[Any], Any] | None:
    """The retriever's own ``reloaded``, or ``None`` (no reload) where it says it cannot be reloaded."""
    blocker = getattr(retriever, "reload_blocker", None)
    if blocker is None:
        return None
    why = blocker()
    if why is not None:
        logger.info("The index is not reloaded when other processes change it: %s.", why)
        return None
    return lambda served: served.reloaded()


def _bot_factory(current: Callable[[], ClaimChecker], llm: Any) -> Callable[[list[tuple[str, str]]], Any]:
    """``factory(history)``: a ``FactCheckChatBot`` for one chat turn, on the server's checks as last loaded
    (``current()``), ``llm`` condensing follow-ups with the session's ``history`` (the bot appends the turn)."""
    from llama_index_carag.verdicts.chat import FactCheckChatBot

    own = None
    if current().synthesizer is None:  # chat without /v1/check verdicts: the bot's own synthesizer on llm
        from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

        own = FactCheckSynthesizer(llm)

    def bot(history: list[tuple[str, str]]) -> Any:
        checker = current() if own is None else replace(current(), synthesizer=own)
        return FactCheckChatBot(checker, llm, history=history)

    return bot


def _remote(pool: Any, *given: Any) -> tuple[Any, Any, Any]:
    """The pool's stand-ins: (synthesizer, stream synthesizer, llm)."""
    if any(x is not None for x in given):
        raise ValueError("create_app: pass llm_pool, or synthesizer/stream_synthesizer/llm, not both")
    from llama_index_carag.serve.llm_remote import RemoteLLM, RemoteSynthesizer

    return RemoteSynthesizer(pool), RemoteSynthesizer(pool, streaming=True), RemoteLLM(pool)


def _api_routes(
    app: FastAPI,
    engine: CheckEngine,
    sessions: SessionStore,
    settings: ServeSettings,
    llm_name: str | None,
    llm_state: Callable[[], dict[str, Any]] | None,
) -> None:
    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/info", response_model=InfoOut)
    def info() -> InfoOut:
        engine.reloader.poll()  # a monitor's call keeps an idle server's copy fresh too
        r = engine.retriever
        return InfoOut(
            version=_version(),
            schema_version=CHECK_SCHEMA_VERSION,
            mode=r.settings.mode,
            k=r.settings.similarity_top_k,
            n_items=int(r.context.n_items_),
            llm=llm_name,
            limits=settings.public(),
            llm_state=None if llm_state is None else llm_state(),
            index=engine.reloader.status(),
        )

    @app.get("/v1/schema/check-result")
    def schema() -> dict[str, Any]:
        return check_result_json_schema()

    @app.post("/v1/check", response_model=CheckResult)
    async def check(body: ClaimRequest) -> CheckResult:
        claim = engine.clean_text(body.claim, "claim", settings.max_claim_chars)
        async with engine.admitted():
            return await engine.check(claim)

    @app.post("/v1/check/stream")
    async def check_stream(body: ClaimRequest) -> StreamingResponse:
        claim = engine.clean_text(body.claim, "claim", settings.max_claim_chars)
        engine.check_admission()  # 503 now, while a status can still be sent
        if engine.stream_synthesizer is not None:
            engine.check_llm()

        return sse_response(engine.stream(claim), engine)

    @app.post("/v1/graph", response_model=GraphOut)
    async def graph(body: ClaimRequest) -> dict[str, Any]:
        claim = engine.clean_text(body.claim, "claim", settings.max_claim_chars)
        async with engine.admitted():
            return await engine.graph(claim)

    bulk_routes(app, engine, settings)
    _session_routes(app, engine, sessions, settings)


def _session_routes(app: FastAPI, engine: CheckEngine, sessions: SessionStore, settings: ServeSettings) -> None:
    @app.post("/v1/sessions", response_model=SessionInfo, status_code=201)
    def create_session() -> SessionInfo:
        engine.require_llm(engine.bot_factory)
        session = sessions.create()
        return SessionInfo(session_id=session.id, max_turns=settings.max_turns, ttl_s=settings.session_ttl_s)

    @app.get("/v1/sessions/{session_id}", response_model=SessionOut)
    def get_session(session_id: str) -> SessionOut:
        session = sessions.get(session_id)
        return SessionOut(session_id=session.id, turns=[ChatTurnOut(**t) for t in session.turns])

    @app.delete("/v1/sessions/{session_id}", status_code=204)
    def delete_session(session_id: str) -> Response:
        sessions.delete(session_id)
        return Response(status_code=204)

    @app.post("/v1/sessions/{session_id}/messages", response_model=ChatTurnOut)
    async def message(session_id: str, body: MessageRequest) -> dict[str, Any]:
        session = sessions.get(session_id)
        text = engine.clean_text(body.message, "message", settings.max_message_chars)
        if session.lock.locked():
            raise ApiError(409, "session_busy", "the session is still answering the previous message")
        if len(session.turns) >= settings.max_turns:
            raise ApiError(409, "turn_limit", f"the session has {settings.max_turns} turns; start a new one")
        async with session.lock, engine.admitted():
            turn = await engine.chat_turn(session.history, text, len(session.turns) + 1)
            session.turns.append(turn)
            session.last_used = sessions.clock()
        return turn


def _security_headers(app: FastAPI) -> None:
    @app.middleware("http")
    async def headers(request: Request, call_next: Callable[[Request], Any]) -> Response:
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("X-Frame-Options", "DENY")
        return response


def _llm_name(llm: Any | None, synthesizer: Any | None) -> str | None:
    if llm is not None:
        try:
            from llama_index_carag.models.resolve import llm_name

            return llm_name(llm)  # the offline Qwen under llama.cpp by name, not by its cache path
        except Exception:  # an LLM without metadata
            return type(llm).__name__
    return None if synthesizer is None else type(synthesizer).__name__


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("llama-index-carag")
    except Exception:  # pragma: no cover - not installed
        return "0"


#: The page runs only its own scripts; Plotly needs inline styles; no other origin is contacted.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_STATIC = {
    "app.js": "text/javascript; charset=utf-8",
    "text.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}


@cache
def _static(name: str) -> bytes:
    return resources.files("llama_index_carag.serve").joinpath("static", name).read_bytes()


@lru_cache(maxsize=1)
def plotly_js_path() -> Path:
    """``plotly.min.js`` inside the installed ``plotly`` Python package (the page never uses a CDN)."""
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():  # pragma: no cover - a broken plotly install
        raise FileNotFoundError(f"plotly.min.js not found in the plotly package at {path}")
    return path


def page_router() -> APIRouter:
    """``GET /`` (the page), ``/static/app.js``, ``/static/text.js``, ``/static/app.css``, ``/static/plotly.min.js``."""
    router = APIRouter()

    @router.get("/", include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(_static("index.html"), headers={"Cache-Control": "no-cache"})

    @router.get("/static/plotly.min.js", include_in_schema=False)
    def plotly_js() -> FileResponse:
        return FileResponse(
            plotly_js_path(),
            media_type="text/javascript; charset=utf-8",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    @router.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in _STATIC:
            from llama_index_carag.serve.errors import ApiError

            raise ApiError(404, "not_found", f"no such file: /static/{name}")
        return Response(_static(name), media_type=_STATIC[name], headers={"Cache-Control": "no-cache"})

    return router
