"""Who may use ``carag serve``, and how much of it one client may hold.

:class:`AccessMiddleware` sits outside every route:

* **a token** (``carag serve --token-file F`` or ``CARAG_SERVE_TOKEN``): every path but ``/healthz`` and
  ``/login`` needs ``Authorization: Bearer <token>``, or the page's session cookie.  Without it: 401
  ``unauthorized`` in the API's error shape (``WWW-Authenticate: Bearer``); a browser asking for the page gets a
  small sign-in form instead, whose ``POST /login`` sets the cookie (HttpOnly, SameSite=Strict; its value is an
  HMAC of the token, never the token) and goes back to the page, whose own requests then carry the cookie.
  Tokens are compared in constant time and never logged.
* **a per-client limit** (``max_client_requests``): a client (by its address) with that many ``POST`` /
  ``DELETE`` requests under ``/v1/`` still running gets 429 ``too_many_requests`` (``Retry-After``) for one more,
  so one client cannot hold every worker.  Behind a proxy every request comes from the proxy's address: there,
  set the limit at the proxy.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import stat
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llama_index_carag.verdicts.check import error_body

logger = logging.getLogger(__name__)

#: The environment variable that holds the token when no ``--token-file`` is given.
TOKEN_ENV = "CARAG_SERVE_TOKEN"
#: A shorter token is refused (a guessable one would be no lock).
MIN_TOKEN_CHARS = 16
#: The page's session cookie.
COOKIE = "carag_session"
#: Paths open without the token: the liveness probe and the sign-in form.
OPEN_PATHS = frozenset({"/healthz", "/login"})
_LOGIN_BODY_BYTES = 4096
_PAGE_HEADERS = [
    (b"content-type", b"text/html; charset=utf-8"),
    (b"content-security-policy", b"default-src 'none'; form-action 'self'; style-src 'unsafe-inline'"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
]


def read_token(path: str | Path | None, environ: dict[str, str] | None = None) -> str | None:
    """The token of ``path`` (its one line, stripped) or of :data:`TOKEN_ENV`; ``None`` when neither is given.

    Raises:
        ValueError: the file cannot be read, or the token is shorter than :data:`MIN_TOKEN_CHARS`, spans lines or
            holds characters a header cannot carry.
    """
    source = f"--token-file {path}" if path is not None else TOKEN_ENV
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
            mode = Path(path).stat().st_mode
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{source}: cannot read it ({exc.__class__.__name__})") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            logger.warning("%s can be read by other users of this machine (chmod 600 it)", source)
    else:
        text = (environ if environ is not None else os.environ).get(TOKEN_ENV, "")
        if not text:
            return None
    token = text.strip()
    if "\n" in token or "\r" in token:
        raise ValueError(f"{source}: the token must be one line")
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"{source}: the token must be at least {MIN_TOKEN_CHARS} characters")
    if not token.isascii() or not token.isprintable() or " " in token:
        raise ValueError(f"{source}: the token must be printable ASCII without spaces")
    return token


class AccessMiddleware:
    """The token check and the per-client limit (module docstring); ``token=None`` and
    ``max_client_requests=None`` turn each off."""

    def __init__(self, app: ASGIApp, token: str | None = None, max_client_requests: int | None = None) -> None:
        self.app, self.max_client_requests = app, max_client_requests
        self._token = token.encode("ascii") if token is not None else None
        self._session = (
            hmac.new(self._token, b"carag-session", hashlib.sha256).hexdigest().encode("ascii")
            if self._token is not None
            else None
        )
        self._running: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope.get("path", ""), scope.get("method", "GET")
        if self._token is not None:
            if path == "/login":
                await self._login(scope, receive, send)
                return
            if path not in OPEN_PATHS and not self._allowed(scope):
                await self._refuse(scope, send)
                return
        limited = self.max_client_requests is not None and method in ("POST", "DELETE") and path.startswith("/v1/")
        if not limited:
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("?", 0))[0]
        if self._running[client] >= self.max_client_requests:  # type: ignore[operator]
            message = f"{self._running[client]} requests of this client are running; wait for one to finish"
            await _send(send, 429, error_body("too_many_requests", message), [(b"retry-after", b"1")])
            return
        self._running[client] += 1
        done = False

        def release() -> None:
            nonlocal done
            if not done:
                done = True
                self._running[client] -= 1
                if self._running[client] <= 0:
                    del self._running[client]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                release()  # before the last byte: a client that asks again once answered is never refused
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            release()

    def _allowed(self, scope: Scope) -> bool:
        assert self._token is not None and self._session is not None
        headers = dict(scope.get("headers") or [])
        scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
        bearer = scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token)
        cookie = _cookie(headers.get(b"cookie", b""), COOKIE.encode())
        return bearer or (cookie is not None and hmac.compare_digest(cookie, self._session))

    async def _refuse(self, scope: Scope, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        wants_page = scope.get("method") == "GET" and b"text/html" in headers.get(b"accept", b"")
        if wants_page and scope.get("path") == "/":
            await _send_page(send, 401, _login_form(""))
            return
        body = error_body("unauthorized", "this server needs a token: send Authorization: Bearer <token>")
        await _send(send, 401, body, [(b"www-authenticate", b'Bearer realm="carag"')])

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._token is not None and self._session is not None
        if scope.get("method") == "GET":
            await _send_page(send, 200, _login_form(""))
            return
        if scope.get("method") != "POST":
            await _send(send, 405, error_body("method_not_allowed", "GET or POST /login"), [])
            return
        body = await _read_small(receive, _LOGIN_BODY_BYTES)
        given = (parse_qs(body.decode("utf-8", "replace")).get("token") or [""])[0].strip().encode("utf-8", "replace")
        if not hmac.compare_digest(given, self._token):
            await _send_page(send, 401, _login_form("That token is not right."))
            return
        cookie = COOKIE.encode() + b"=" + self._session + b"; HttpOnly; SameSite=Strict; Path=/"
        await send(
            {"type": "http.response.start", "status": 303, "headers": [(b"location", b"/"), (b"set-cookie", cookie)]}
        )
        await send({"type": "http.response.body", "body": b""})


def _cookie(header: bytes, name: bytes) -> bytes | None:
    for part in header.split(b";"):
        key, sep, value = part.strip().partition(b"=")
        if sep and key == name:
            return value
    return None


async def _read_small(receive: Receive, limit: int) -> bytes:
    """The request body, cut at ``limit`` bytes (a sign-in form is a few dozen)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b""
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > limit or not message.get("more_body", False):
            return b"".join(chunks)[:limit]


async def _send(send: Send, status: int, body: dict, headers: list[tuple[bytes, bytes]]) -> None:
    data = json.dumps(body).encode("utf-8")
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": data})


async def _send_page(send: Send, status: int, html: str) -> None:
    data = html.encode("utf-8")
    headers = [*_PAGE_HEADERS, (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def _login_form(note: str) -> str:
    warning = f'<p style="color:#b00">{note}</p>' if note else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>carag: sign in</title></head>'
        '<body style="font-family:sans-serif;max-width:28em;margin:4em auto">'
        "<h1>llama-index-carag</h1><p>This server needs its access token.</p>"
        f"{warning}"
        '<form method="post" action="/login"><label>Token <input type="password" name="token" '
        'autocomplete="current-password" required autofocus></label> <button type="submit">Sign in</button></form>'
        "</body></html>"
    )
