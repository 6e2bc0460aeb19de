"""Errors of the HTTP API: the package's one error shape (:func:`~llama_index_carag.verdicts.check.error_body`,
``{"error": {"code", "message", "details"?}}``) for every status.

=====  ======================  ==================================================
 400   ``invalid_json``        the body is not JSON
 404   ``not_found``           unknown path, or unknown / expired chat session
 405   ``method_not_allowed``  wrong HTTP method
 409   ``session_busy``        the session is already answering a message
 409   ``turn_limit``          the session reached ``max_turns``
 413   ``body_too_large``      the body is over ``max_body_bytes``
 415   ``unsupported_media``   a body that is not ``application/json``
 422   ``invalid_request``     a field is missing, of the wrong type, empty or too long
 422   ``too_many_claims``     a text with more than ``max_text_claims`` claims, a batch over ``max_batch_claims``
 502   ``llm_error``           the language model failed
 503   ``busy``                ``max_pending`` requests are already admitted (``Retry-After``)
 503   ``too_many_sessions``   ``max_sessions`` sessions are open
 503   ``no_llm``              the server runs without an LLM (verdicts and chat are off)
 503   ``llm_unavailable``     the LLM worker is (re)starting, or died during the call (``Retry-After``)
 504   ``timeout``             the request ran past ``request_timeout_s``
 500   ``internal_error``      a bug: logged with its traceback, no details sent
=====  ======================  ==================================================
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llama_index_carag.verdicts.check import CheckFailed, error_body

logger = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media",
    422: "invalid_request",
    500: "internal_error",
}


class ApiError(CheckFailed):
    """An error answered as ``{"error": {"code", "message"}}`` with ``status``; in a batch or a text, the failure
    of one claim (a :class:`~llama_index_carag.verdicts.check.CheckFailed`: that claim's error event)."""

    def __init__(self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(code, message)
        self.status, self.headers = status, headers


def _validation_details(exc: RequestValidationError) -> tuple[str, str, list[dict[str, Any]]]:
    details = []
    for err in exc.errors():
        loc = [str(part) for part in err.get("loc", ()) if part != "body"]
        if err.get("type") == "json_invalid":
            return "invalid_json", "the request body is not valid JSON", []
        details.append({"field": ".".join(loc) or "body", "message": str(err.get("msg", "invalid"))})
    first = details[0] if details else {"field": "body", "message": "invalid request"}
    return "invalid_request", f"{first['field']}: {first['message']}", details


def install_error_handlers(app: FastAPI) -> None:
    """Route every error through :func:`~llama_index_carag.verdicts.check.error_body`."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        code, message, details = _validation_details(exc)
        return JSONResponse(error_body(code, message, details), status_code=400 if code == "invalid_json" else 422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        if exc.status_code == 404:
            message = f"no such endpoint: {request.method} {request.url.path}"
        return JSONResponse(error_body(code, message), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("internal_error", "internal server error (logged)"), status_code=500)


class BodyLimitMiddleware:
    """Answer 413 for a body over ``max_bytes`` (by ``Content-Length``, or while it streams in),
    and 415 for a non-JSON body on a POST."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            await _send_error(send, 413, "body_too_large", f"the request body is over {self.max_bytes} bytes")
            return
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if (length not in ("", "0") or "transfer-encoding" in headers) and ctype != "application/json":
            await _send_error(send, 415, "unsupported_media", "send the body as application/json")
            return
        chunks, size = [], 0  # bodies are small (max_bytes): read it all, then replay it
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await _send_error(send, 413, "body_too_large", f"the request body is over {self.max_bytes} bytes")
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _send_error(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps(error_body(code, message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
