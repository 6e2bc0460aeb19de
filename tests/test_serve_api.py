"""The HTTP API of ``carag serve`` through the real app (FastAPI), on the demo index, with a stub LLM.

In-flight requests are held by an Event the stub LLM waits on, never by sleeping, so no
assertion depends on how fast the machine is.
"""

from __future__ import annotations

import html
import json
import threading
from pathlib import Path

import anyio
import httpx
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from llama_index_carag.core.validation import sanitize_text
from llama_index_carag.retrieval.retriever import ContextAwareRetriever
from llama_index_carag.serve import ServeSettings
from llama_index_carag.verdicts.check import CHECK_SCHEMA_VERSION, CheckResult, check_claim
from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer
from tests.serve_helpers import DEFAULT_ANSWER, ServeStubLLM, assert_error, make_app, sse_events

CLAIM = "Offshore wind farms drive fish away."
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def retriever(demo_index, demo_corpus):
    return ContextAwareRetriever.from_index(
        demo_index, "paper", claim_nodes=demo_corpus.claim_nodes, n_clusters=3, delta=0.5
    )


@pytest.fixture()
def client(retriever):
    with TestClient(make_app(retriever, ServeStubLLM())) as c:
        yield c


# ------------------------------------------------------------------ info
def test_health_info_and_schema(client, retriever):
    assert client.get("/healthz").json() == {"status": "ok"}
    info = client.get("/v1/info").json()
    assert info["schema_version"] == CHECK_SCHEMA_VERSION
    assert (info["mode"], info["k"], info["n_items"]) == ("unsupervised", 6, retriever.context.n_items_)
    assert info["llm"] == "serve-stub" and info["limits"]["max_claim_chars"] == ServeSettings().max_claim_chars
    schema = client.get("/v1/schema/check-result").json()
    assert {"schema_version", "claim", "verdict", "settings", "soi", "evidence"} <= set(schema["properties"])
    paths = client.get("/openapi.json").json()["paths"]
    assert {
        "/v1/check",
        "/v1/check/stream",
        "/v1/graph",
        "/v1/sessions",
        "/v1/sessions/{session_id}",
        "/v1/sessions/{session_id}/messages",
    } <= set(paths)
    assert_error(client.get("/docs"), 404, "not_found")  # Swagger UI would need a CDN


# ------------------------------------------------------------------ check
def test_check_is_the_cli_schema_with_verdict_and_citations(client, retriever):
    got = client.post("/v1/check", json={"claim": CLAIM})
    assert got.status_code == 200
    data = got.json()
    CheckResult.model_validate(data)
    # the same function `carag check --json` prints
    expected = check_claim(retriever, CLAIM, FactCheckSynthesizer(ServeStubLLM(), decision="llm")).to_json_dict()
    assert data == expected
    assert data["schema_version"] == CHECK_SCHEMA_VERSION and data["claim"] == CLAIM
    assert data["verdict"]["label"] == "REFUTED"
    ids = [row["id"] for row in data["evidence"]]
    assert data["verdict"]["evidence_ids"] == ids[:2]  # the stub cites [1] and [2]
    assert [row["rank"] for row in data["evidence"]] == list(range(1, 7))
    assert all({"cluster", "claim_similarity", "in_soi"} <= set(row["carag"]) for row in data["evidence"])
    assert data["soi"]["empty_reason"] is None  # δ 0.5: the SOI holds items


def test_without_llm_retrieval_only(retriever):
    with TestClient(make_app(retriever)) as c:
        data = c.post("/v1/check", json={"claim": CLAIM}).json()
        assert data["verdict"] is None and len(data["evidence"]) == 6
        events = sse_events(c.post("/v1/check/stream", json={"claim": CLAIM}).text)
        assert [e for e, _ in events] == ["evidence", "done"]
        assert events[1][1] == data
        assert_error(c.post("/v1/sessions"), 503, "no_llm")
        assert c.get("/v1/info").json()["llm"] is None


def test_an_empty_soi_says_why_in_check_and_stream(retriever):
    strict = retriever.with_settings(delta=0.99)  # nothing of the claim's cluster passes: an empty SOI
    with TestClient(make_app(strict)) as c:
        data = c.post("/v1/check", json={"claim": CLAIM}).json()
        events = sse_events(c.post("/v1/check/stream", json={"claim": CLAIM}).text)
        graph = c.post("/v1/graph", json={"claim": CLAIM}).json()
    reason = data["soi"]["empty_reason"]
    assert graph["soi"]["empty_reason"] == reason  # the graph's SOI says the same, and its caption shows it
    captions = [
        html.unescape(str(a.get("text", "")).replace("<br>", " ")) for a in graph["figure"]["layout"]["annotations"]
    ]
    assert reason["text"] in captions
    assert reason["text"].startswith("SOI empty: no item of the claim's cluster") and "δ=0.99" in reason["text"]
    assert reason["delta"] == 0.99 and reason["cluster_size"] == data["soi"]["cluster_size"] > 0
    assert reason["closest_id"] and -1.0 <= reason["closest_similarity"] <= 0.99
    assert events[0][1]["soi"]["empty_reason"] == reason and events[-1][1] == data
    CheckResult.model_validate(data)


# ------------------------------------------------------------------ stream
def test_stream_order_tokens_then_verdict_then_done(client):
    response = client.post("/v1/check/stream", json={"claim": CLAIM})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    kinds = [e for e, _ in events]
    n = len(DEFAULT_ANSWER.split(" "))
    assert kinds == ["evidence"] + ["token"] * n + ["verdict", "done"]
    evidence, verdict, done = events[0][1], events[-2][1], events[-1][1]
    assert evidence["verdict"] is None and evidence["evidence"] == done["evidence"]
    assert "".join(d["text"] for e, d in events if e == "token") == DEFAULT_ANSWER
    assert done["verdict"] == verdict and verdict["label"] == "REFUTED"
    assert done == client.post("/v1/check", json={"claim": CLAIM}).json()


# ------------------------------------------------------------------ graph
def test_graph_is_the_escaped_soi_figure(client):
    hostile = "Wind farms <img src=x onerror=alert(1)> harm fish."
    data = client.post("/v1/graph", json={"claim": hostile}).json()
    assert set(data) == {"soi", "figure"} and data["soi"]["claim"] == hostile
    assert {"data", "layout"} <= set(data["figure"])
    dumped = json.dumps(data["figure"])
    assert "<img" not in dumped and "&lt;img" in dumped  # visualize escaped it for Plotly


def test_graph_embeds_the_claim_once_and_says_what_the_check_says(retriever, monkeypatch):
    """The graph goes through the check's retrieval: one embedding (the empty SOI's closest item included)."""
    from llama_index.core.base.embeddings.base import BaseEmbedding

    strict = retriever.with_settings(delta=0.99)  # an empty SOI: its reason looks up the closest item
    embed, calls = BaseEmbedding.get_query_embedding, []

    def counted(self, query):
        calls.append(query)
        return embed(self, query)

    with TestClient(make_app(strict)) as c:
        data = c.post("/v1/check", json={"claim": CLAIM}).json()
        monkeypatch.setattr(BaseEmbedding, "get_query_embedding", counted)
        graph = c.post("/v1/graph", json={"claim": CLAIM}).json()
    assert calls == [CLAIM]
    assert graph["soi"] == data["soi"] and graph["soi"]["empty_reason"]["closest_id"]


# ------------------------------------------------------------------ sessions
def test_a_chat_turns_evidence_rows_carry_the_verifiers_stances(retriever):
    with TestClient(make_app(retriever, ServeStubLLM(), decision="verifier")) as c:
        sid = c.post("/v1/sessions").json()["session_id"]
        turn = c.post(f"/v1/sessions/{sid}/messages", json={"message": CLAIM}).json()
    stances = {st["id"]: st for st in turn["verdict"]["passage_stances"]}
    assert turn["evidence"] and {row["id"] for row in turn["evidence"]} <= set(stances)
    for row in turn["evidence"]:
        assert (row["stance"], row["stance_score"]) == (stances[row["id"]]["stance"], stances[row["id"]]["score"])


def test_session_lifecycle(client):
    created = client.post("/v1/sessions")
    assert created.status_code == 201
    sid = created.json()["session_id"]
    first = client.post(f"/v1/sessions/{sid}/messages", json={"message": CLAIM}).json()
    second = client.post(f"/v1/sessions/{sid}/messages", json={"message": "Why?"}).json()
    assert (first["turn"], second["turn"]) == (1, 2)
    assert first["verdict"]["label"] == "REFUTED" and first["text"] == DEFAULT_ANSWER and first["evidence"]
    assert first["verdict"]["evidence_ids"] == [r["id"] for r in first["evidence"]][:2]
    history = client.get(f"/v1/sessions/{sid}").json()
    assert [t["message"] for t in history["turns"]] == [CLAIM, "Why?"]
    assert client.delete(f"/v1/sessions/{sid}").status_code == 204
    assert_error(client.get(f"/v1/sessions/{sid}"), 404, "not_found")
    assert_error(client.post(f"/v1/sessions/{sid}/messages", json={"message": "x"}), 404, "not_found")
    assert_error(client.delete(f"/v1/sessions/{sid}"), 404, "not_found")


def test_sessions_expire_by_the_clock_and_are_bounded(retriever):
    now = [1000.0]
    app = make_app(retriever, ServeStubLLM(), max_sessions=2, session_ttl_s=60, clock=lambda: now[0])
    with TestClient(app) as c:
        a = c.post("/v1/sessions").json()["session_id"]
        now[0] += 30
        b = c.post("/v1/sessions").json()["session_id"]
        err = assert_error(c.post("/v1/sessions"), 503, "too_many_sessions")
        assert "2 chat sessions" in err["message"]
        now[0] += 40  # a idle 70 s > 60: expired; b idle 40 s: alive
        assert_error(c.get(f"/v1/sessions/{a}"), 404, "not_found")
        assert c.get(f"/v1/sessions/{b}").status_code == 200
        assert c.post("/v1/sessions").status_code == 201  # a's place is free again


def test_turn_limit(retriever):
    with TestClient(make_app(retriever, ServeStubLLM(), max_turns=2)) as c:
        sid = c.post("/v1/sessions").json()["session_id"]
        for _ in range(2):
            assert c.post(f"/v1/sessions/{sid}/messages", json={"message": CLAIM}).status_code == 200
        assert_error(c.post(f"/v1/sessions/{sid}/messages", json={"message": CLAIM}), 409, "turn_limit")
        assert len(c.get(f"/v1/sessions/{sid}").json()["turns"]) == 2  # nothing lost


# ------------------------------------------------------------------ bad requests
BAD_REQUESTS = [
    ("not json", "/v1/check", b"{", "application/json", 400, "invalid_json"),
    ("claim not a string", "/v1/check", b'{"claim": 3}', "application/json", 422, "invalid_request"),
    ("claim missing", "/v1/check", b"{}", "application/json", 422, "invalid_request"),
    ("extra field", "/v1/check", b'{"claim": "a", "k": 3}', "application/json", 422, "invalid_request"),
    ("not an object", "/v1/check", b'"a claim"', "application/json", 422, "invalid_request"),
    ("empty claim", "/v1/check", b'{"claim": ""}', "application/json", 422, "invalid_request"),
    ("whitespace claim", "/v1/check/stream", b'{"claim": " \\n\\t "}', "application/json", 422, "invalid_request"),
    ("only a NUL", "/v1/graph", b'{"claim": "\\u0000"}', "application/json", 422, "invalid_request"),
    (
        "claim too long",
        "/v1/check",
        json.dumps({"claim": "a" * 101}).encode(),
        "application/json",
        422,
        "invalid_request",
    ),
    (
        "body too large",
        "/v1/check",
        json.dumps({"claim": "a" * 3000}).encode(),
        "application/json",
        413,
        "body_too_large",
    ),
    ("text/plain body", "/v1/check", b'{"claim": "a"}', "text/plain", 415, "unsupported_media"),
    ("form body", "/v1/graph", b"claim=a", "application/x-www-form-urlencoded", 415, "unsupported_media"),
]


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_requests_get_a_clear_error(retriever, case):
    _, path, body, ctype, status, code = case
    with TestClient(make_app(retriever, ServeStubLLM(), max_claim_chars=100, max_body_bytes=2048)) as c:
        err = assert_error(c.post(path, content=body, headers={"content-type": ctype}), status, code)
        if "too long" in case[0]:
            assert "101 characters" in err["message"] and "100" in err["message"]
        assert c.post("/v1/check", json={"claim": CLAIM}).status_code == 200  # the server is fine afterwards


def test_chunked_body_over_the_limit_is_413(retriever):
    with TestClient(make_app(retriever, ServeStubLLM(), max_body_bytes=1024)) as c:

        def chunks():
            yield b'{"claim": "'
            for _ in range(10):
                yield b"a" * 500
            yield b'"}'

        assert_error(
            c.post("/v1/check", content=chunks(), headers={"content-type": "application/json"}), 413, "body_too_large"
        )


def test_unknown_paths_methods_and_sessions(client):
    assert_error(client.get("/v1/nope"), 404, "not_found")
    assert_error(client.get("/v1/check"), 405, "method_not_allowed")
    assert_error(client.get("/static/../app.py"), 404, "not_found")
    assert_error(client.get("/static/secret.txt"), 404, "not_found")
    assert_error(client.get("/v1/sessions/does-not-exist"), 404, "not_found")
    assert_error(client.post("/v1/sessions/does-not-exist/messages", json={"message": "x"}), 404, "not_found")
    sid = client.post("/v1/sessions").json()["session_id"]
    assert_error(client.post(f"/v1/sessions/{sid}/messages", json={"message": ""}), 422, "invalid_request")
    assert_error(client.post(f"/v1/sessions/{sid}/messages", json={"text": "x"}), 422, "invalid_request")


def test_llm_failure_is_502_and_a_stream_error_event(retriever):
    with TestClient(make_app(retriever, ServeStubLLM(fail=True)), raise_server_exceptions=False) as c:
        err = assert_error(c.post("/v1/check", json={"claim": CLAIM}), 502, "llm_error")
        assert "RuntimeError" in err["message"]
        events = sse_events(c.post("/v1/check/stream", json={"claim": CLAIM}).text)
        assert [e for e, _ in events] == ["evidence", "error"] and events[-1][1]["error"]["code"] == "llm_error"
        sid = c.post("/v1/sessions").json()["session_id"]
        assert_error(c.post(f"/v1/sessions/{sid}/messages", json={"message": CLAIM}), 502, "llm_error")
        assert c.get(f"/v1/sessions/{sid}").json()["turns"] == []
        assert c.post("/v1/graph", json={"claim": CLAIM}).status_code == 200  # no LLM needed


def test_hostile_text_round_trips(client):
    claim = "Wind\x00 farms <script>alert(1)</script> \u05e8\u05d5\u05d7 \ud800 harm fish \U0001f41f"
    body = json.dumps({"claim": claim})  # \ud800 travels as a JSON escape
    data = client.post("/v1/check", content=body, headers={"content-type": "application/json"}).json()
    assert data["claim"] == sanitize_text(claim)
    assert data["claim"].startswith("Wind farms <script>alert(1)</script> \u05e8\u05d5\u05d7 \ufffd")
    assert data["claim"].endswith("harm fish \U0001f41f") and not any(
        0xD800 <= ord(ch) <= 0xDFFF for ch in data["claim"]
    )
    assert data["verdict"]["label"] == "REFUTED"


def test_security_headers_and_no_cdn(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert client.post("/v1/check", json={"claim": CLAIM}).headers["x-frame-options"] == "DENY"
    import plotly

    shipped = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    js = client.get("/static/plotly.min.js")
    assert js.status_code == 200 and js.content == shipped.read_bytes()
    for name in ("/", "/static/app.js", "/static/app.css"):
        text = client.get(name).text
        assert (
            "http://" not in text and "https://" not in text and "innerHTML" not in text.replace("never innerHTML", "")
        )


def test_settings_are_checked():
    for bad in (
        {"max_pending": 0},
        {"request_timeout_s": 0},
        {"retrieval_workers": 1.5},
        {"session_ttl_s": float("inf")},
        {"max_turns": True},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ServeSettings(**bad)


# ------------------------------------------------------------------ in flight (held by an Event)
async def _wait(cond) -> None:
    with anyio.fail_after(120):  # a guard against a hang, not a measurement
        while not cond():
            await anyio.sleep(0.01)


def _async_client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=120)


def test_busy_is_503_with_retry_after(retriever):
    gate = threading.Event()
    app = make_app(retriever, ServeStubLLM(gate=gate), max_pending=2)

    async def scenario() -> None:
        async with _async_client(app) as c, anyio.create_task_group() as tg:
            results = []

            async def one() -> None:
                results.append(await c.post("/v1/check", json={"claim": CLAIM}))

            tg.start_soon(one)
            tg.start_soon(one)
            await _wait(lambda: app.state.engine.pending == 2)
            busy = await c.post("/v1/check", json={"claim": CLAIM})
            assert_error(busy, 503, "busy")
            assert busy.headers["retry-after"] == "1"
            gate.set()
        assert [r.status_code for r in results] == [200, 200]
        assert app.state.engine.pending == 0

    try:
        anyio.run(scenario)
    finally:
        gate.set()


def test_timeout_is_504_and_a_stream_error(retriever):
    gate = threading.Event()  # never set during the requests: the LLM cannot answer in time
    app = make_app(retriever, ServeStubLLM(gate=gate), request_timeout_s=0.5)

    async def scenario() -> None:
        async with _async_client(app) as c:
            err = assert_error(await c.post("/v1/check", json={"claim": CLAIM}), 504, "timeout")
            assert "0.5 s" in err["message"]
            events = sse_events((await c.post("/v1/check/stream", json={"claim": CLAIM})).text)
            assert events[-1][0] == "error" and events[-1][1]["error"]["code"] == "timeout"
            assert "done" not in [e for e, _ in events]
            sid = (await c.post("/v1/sessions")).json()["session_id"]
            assert_error(await c.post(f"/v1/sessions/{sid}/messages", json={"message": CLAIM}), 504, "timeout")
            gate.set()  # the abandoned turn now finishes in its worker thread
            for _ in range(100):
                await anyio.sleep(0.02)
            assert app.state.sessions.get(sid).history == []  # it adds nothing to the session's memory

    try:
        anyio.run(scenario)
    finally:
        gate.set()


def test_one_message_at_a_time_per_session(retriever):
    gate, entered = threading.Event(), threading.Semaphore(0)
    app = make_app(retriever, ServeStubLLM(gate=gate, entered=entered))

    async def scenario() -> None:
        async with _async_client(app) as c:
            sid = (await c.post("/v1/sessions")).json()["session_id"]
            first = []
            async with anyio.create_task_group() as tg:

                async def ask() -> None:
                    first.append(await c.post(f"/v1/sessions/{sid}/messages", json={"message": CLAIM}))

                tg.start_soon(ask)
                await anyio.to_thread.run_sync(entered.acquire)  # the first message is with the LLM
                busy = await c.post(f"/v1/sessions/{sid}/messages", json={"message": "again"})
                assert_error(busy, 409, "session_busy")
                assert_error(await c.delete(f"/v1/sessions/{sid}"), 409, "session_busy")
                other = (await c.post("/v1/sessions")).json()["session_id"]  # other sessions are not blocked
                assert (await c.get(f"/v1/sessions/{other}")).status_code == 200
                gate.set()
            assert first[0].status_code == 200
            turns = (await c.get(f"/v1/sessions/{sid}")).json()["turns"]
            assert [t["message"] for t in turns] == [CLAIM]  # the refused message left no trace

    try:
        anyio.run(scenario)
    finally:
        gate.set()


def test_many_concurrent_checks_equal_sequential(retriever, demo_corpus):
    app = make_app(retriever, ServeStubLLM())
    claims = [c.text for c in demo_corpus.claim_nodes]
    expected = {
        c: check_claim(retriever, c, FactCheckSynthesizer(ServeStubLLM(), decision="llm")).to_json_dict()
        for c in claims
    }

    async def scenario() -> list[httpx.Response]:
        out: list[httpx.Response] = []
        async with _async_client(app) as c, anyio.create_task_group() as tg:

            async def one(claim: str) -> None:
                out.append(await c.post("/v1/check", json={"claim": claim}))

            for i in range(60):
                tg.start_soon(one, claims[i % len(claims)])
        return out

    responses = anyio.run(scenario)
    assert len(responses) == 60 and all(r.status_code == 200 for r in responses)
    for r in responses:
        data = r.json()
        assert data == expected[data["claim"]]
