"""Who may use ``carag serve``: the token on every route and the page, the sign-in cookie, the per-client limit,
and the refusal to serve another machine without a token; in process and over real HTTP on loopback."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.serve.access import COOKIE, MIN_TOKEN_CHARS, TOKEN_ENV, read_token
from llama_index_carag.serve.command import bind_socket
from tests.serve_helpers import LiveServer, ServeStubLLM, assert_error, build_demo_index, make_app

TOKEN = "s3cret-token-for-tests-0123456789"
CLAIM = "Rising sea temperatures are a main cause of coral bleaching."
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def retriever(demo_index, demo_corpus):
    return ContextAwareRetriever.from_index(
        demo_index, "paper", claim_nodes=demo_corpus.claim_nodes, n_clusters=3, delta=0.5
    )


def _app(retriever, **settings):
    from llama_index_carag.serve import ServeSettings, create_app
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    llm = settings.pop("llm", ServeStubLLM())
    return create_app(
        retriever,
        FactCheckSynthesizer(llm, decision="llm"),
        llm=llm,
        settings=ServeSettings(**settings),
        token=settings.pop("token", TOKEN) if "token" in settings else TOKEN,
    )


def _client(app) -> TestClient:
    return TestClient(app, base_url="http://test")


#: The page's routes (an included router: not listed in ``app.routes``).
PAGE = [("GET", "/"), ("GET", "/static/plotly.min.js"), ("GET", "/static/app.js")]


def _routes(app) -> list[tuple[str, str]]:
    """Every (method, path) the app serves, with a sample id for path parameters, and the page's."""
    out = list(PAGE)
    for route in app.routes:
        for method in sorted(getattr(route, "methods", None) or []):
            if method != "HEAD":
                out.append((method, route.path.replace("{session_id}", "abc").replace("{path:path}", "app.js")))
    return out


def test_without_the_token_every_route_but_health_and_login_is_401(retriever):
    app = _app(retriever)
    routes = _routes(app)
    assert ("POST", "/v1/check") in routes and ("GET", "/") in routes and len(routes) > 10
    with _client(app) as c:
        for method, path in routes:
            r = c.request(method, path, json={"claim": CLAIM} if method == "POST" else None)
            if path in ("/healthz", "/login"):
                assert r.status_code != 401, path
                continue
            assert_error(r, 401, "unauthorized")
            assert r.headers["www-authenticate"].startswith("Bearer")
            wrong = c.request(method, path, headers={"Authorization": "Bearer " + TOKEN[:-1] + "x"})
            assert wrong.status_code == 401, path
        assert c.get("/healthz").json() == {"status": "ok"}


def test_with_the_token_the_answers_are_those_of_an_open_server(retriever):
    secured, open_app = _app(retriever), make_app(retriever, ServeStubLLM())
    with _client(secured) as c, _client(open_app) as o:
        assert (
            c.post("/v1/check", json={"claim": CLAIM}, headers=BEARER).json()
            == o.post("/v1/check", json={"claim": CLAIM}).json()
        )
        info = c.get("/v1/info", headers=BEARER).json()
        assert info["n_items"] == o.get("/v1/info").json()["n_items"]
        assert c.post("/v1/sessions", headers=BEARER).status_code == 201


def test_the_page_signs_in_with_a_cookie_that_is_not_the_token(retriever):
    app = _app(retriever)
    with _client(app) as c:
        page = c.get("/", headers={"Accept": "text/html"})
        assert page.status_code == 401 and '<form method="post" action="/login">' in page.text
        wrong = c.post("/login", data={"token": "nope"})
        assert wrong.status_code == 401 and "not right" in wrong.text and COOKIE not in c.cookies
        signed = c.post("/login", data={"token": TOKEN}, follow_redirects=False)
        assert signed.status_code == 303 and signed.headers["location"] == "/"
        cookie = signed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
        assert c.get("/").status_code == 200  # the cookie is sent from now on
        assert c.post("/v1/check", json={"claim": CLAIM}).status_code == 200
        c.cookies.set(COOKIE, "forged")
        assert c.get("/").status_code == 401


def test_one_client_with_too_many_requests_running_gets_429(retriever):
    gate = threading.Event()
    app = _app(retriever, llm=ServeStubLLM(gate=gate), max_client_requests=1)

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app, client=("10.0.0.1", 1))
        other = httpx.ASGITransport(app=app, client=("10.0.0.2", 1))
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://t", timeout=120, headers=BEARER) as c,
            httpx.AsyncClient(transport=other, base_url="http://t", timeout=120, headers=BEARER) as d,
            anyio.create_task_group() as tg,
        ):
            results = []

            async def one(client) -> None:
                results.append(await client.post("/v1/check", json={"claim": CLAIM}))

            tg.start_soon(one, c)
            with anyio.fail_after(120):
                while app.state.engine.pending < 1:
                    await anyio.sleep(0.01)
            second = await c.post("/v1/check", json={"claim": CLAIM})
            assert_error(second, 429, "too_many_requests")
            assert second.headers["retry-after"] == "1"
            tg.start_soon(one, d)  # another client is not held back
            with anyio.fail_after(120):
                while app.state.engine.pending < 2:
                    await anyio.sleep(0.01)
            assert (await c.get("/v1/info")).status_code == 200  # reads are not counted
            gate.set()
        assert [r.status_code for r in results] == [200, 200]

    try:
        anyio.run(scenario)
    finally:
        gate.set()


def test_tokens_are_read_and_checked(tmp_path):
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    f.chmod(0o600)
    assert read_token(f) == TOKEN
    assert read_token(None, {}) is None and read_token(None, {TOKEN_ENV: TOKEN}) == TOKEN
    for bad, needle in (("short", str(MIN_TOKEN_CHARS)), ("a" * 20 + "\n" + "b" * 20, "one line"), ("é" * 20, "ASCII")):
        f.write_text(bad)
        with pytest.raises(ValueError, match=needle):
            read_token(f)
    with pytest.raises(ValueError, match="cannot read"):
        read_token(tmp_path / "missing")


def test_another_machine_is_served_only_with_a_token_or_insecure():
    with pytest.raises(ValueError, match="--token-file"):
        bind_socket("0.0.0.0", 0)
    for kwargs in ({"token": True}, {"insecure": True}):
        bind_socket("0.0.0.0", 0, **kwargs).close()
    bind_socket("127.0.0.1", 0).close()


@pytest.fixture(scope="module")
def live_index(tmp_path_factory):
    return build_demo_index(tmp_path_factory.mktemp("access") / "index")


def _http(url: str, headers: dict[str, str] | None = None, data: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_carag_serve_with_a_token_file_over_real_http(live_index, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    server = LiveServer(live_index, "--no-llm", "--token-file", str(token_file))
    try:
        body = b'{"claim": "Offshore wind farms drive fish away."}'
        json_type = {"Content-Type": "application/json"}
        status, data = _http(server.url + "/v1/check", json_type, body)
        assert status == 401 and b'"unauthorized"' in data
        status, data = _http(server.url + "/v1/check", {**json_type, **BEARER}, body)
        assert status == 200 and b'"evidence"' in data
        assert _http(server.url + "/healthz")[0] == 200
        assert _http(server.url + "/v1/info")[0] == 401
    finally:
        log = server.stop()
    assert TOKEN not in log


def test_carag_serve_refuses_another_machine_without_a_token(live_index):
    import subprocess
    import sys
    from pathlib import Path

    carag = Path(sys.executable).parent / "carag"
    proc = subprocess.run(
        [str(carag), "serve", "--index", str(live_index), "--host", "0.0.0.0", "--port", "0", "--no-llm"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 2 and "--token-file" in proc.stderr and "Traceback" not in proc.stderr


def test_a_request_counts_until_its_last_byte_is_sent_not_until_the_app_returns():
    """A client that asks again as soon as it has its answer is never refused (the soak found it was)."""
    from llama_index_carag.serve.access import AccessMiddleware

    answered, later = anyio.Event(), anyio.Event()

    async def app(scope, receive, send):
        if scope["path"] == "/v1/slow":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}", "more_body": False})
            answered.set()
            await later.wait()  # the app has not returned yet
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    middleware = AccessMiddleware(app, max_client_requests=1)
    statuses: list[int] = []

    async def send(message):
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    def scope(path):
        return {"type": "http", "path": path, "method": "POST", "headers": [], "client": ("127.0.0.1", 5)}

    async def main():
        async with anyio.create_task_group() as tg:
            tg.start_soon(middleware, scope("/v1/slow"), receive, send)
            await answered.wait()
            await middleware(scope("/v1/next"), receive, send)
            later.set()

    anyio.run(main)
    assert statuses == [200, 200]
