"""``POST /v1/check-text`` through the real app (FastAPI), on the demo index, with a stub LLM whose verdict
follows the claim's words: the streamed claims equal ``check_text`` in Python, their checks equal
``POST /v1/check``; the limits; a failing claim is reported and the stream goes on.
"""

from __future__ import annotations

import argparse
import json
import threading
from pathlib import Path

import anyio
import httpx
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from llama_index_carag.retrieval.retriever import ContextAwareRetriever
from llama_index_carag.serve import ServeSettings
from llama_index_carag.serve.command import add_serve_arguments, settings_from_args
from llama_index_carag.verdicts.bulk import TextCheckResult, TextClaim, check_text
from llama_index_carag.verdicts.check import ClaimChecker
from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer
from tests.serve_helpers import ServeStubLLM, assert_error, make_app, sse_events
from tests.serve_text_helpers import LabelStubLLM

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]

# Five sentences, three check-worthy (one per label of LabelStubLLM); an emoji and non-ASCII text before
# the claims, so the spans are code points of the text, not bytes.
TEXT = (
    "Hello everyone \U0001f44b, thanks for reading — ça va? "
    "Offshore wind farms drive fish away from the North Sea coast. What do you think? "
    "The cost of solar panels fell by 80% between 2010 and 2020.\n\n"
    "Electric cars emit more CO2 than petrol cars over their lifetime."
)


@pytest.fixture(scope="module")
def retriever(demo_index, demo_corpus):
    return ContextAwareRetriever.from_index(
        demo_index, "paper", claim_nodes=demo_corpus.claim_nodes, n_clusters=3, delta=0.5
    )


def without_index(data: dict) -> dict:
    return {k: v for k, v in data.items() if k != "index"}


def test_each_claim_streams_as_check_text_gives_it(retriever):
    with TestClient(make_app(retriever, LabelStubLLM())) as c:
        response = c.post("/v1/check-text", json={"text": TEXT})
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response.text)
        expected = check_text(ClaimChecker(retriever, FactCheckSynthesizer(LabelStubLLM(), decision="llm")), TEXT)
        assert [e for e, _ in events] == ["claims"] + ["claim"] * 3 + ["summary"]
        found = events[0][1]
        assert found["text"] == TEXT and found["sentences"] == 5
        assert [(f["index"], f["start"], f["end"], f["text"]) for f in found["claims"]] == [
            (i, cl.start, cl.end, cl.text) for i, cl in enumerate(expected.claims)
        ]
        assert all(TEXT[f["start"] : f["end"]] == f["text"] for f in found["claims"])
        claims = [data for event, data in events if event == "claim"]
        assert [d["index"] for d in claims] == [0, 1, 2]
        assert [without_index(d) for d in claims] == [cl.model_dump(mode="json") for cl in expected.claims]
        assert [TextClaim.model_validate(without_index(d)).label for d in claims] == [
            "REFUTED",
            "SUPPORTED",
            "NOT_ENOUGH_INFO",
        ]
        for d in claims:  # the one claim-check path: the same result as POST /v1/check of that claim
            assert d["check"] == c.post("/v1/check", json={"claim": d["text"]}).json()
        summary = events[-1][1]
        assert summary == expected.summary.model_dump(mode="json") and summary["failed"] == 0
        assert summary["labels"] == {"SUPPORTED": 1, "REFUTED": 1, "NOT_ENOUGH_INFO": 1}
        # the events rebuild `carag check-text --json`
        rebuilt = {"text": found["text"], "claims": [without_index(d) for d in claims], "summary": summary}
        assert TextCheckResult.model_validate(rebuilt).to_json_dict() == expected.to_json_dict()


def test_schema_info_and_openapi(retriever):
    with TestClient(make_app(retriever, LabelStubLLM())) as c:
        published = json.loads((ROOT / "docs" / "schemas" / "text-check-result.json").read_text(encoding="utf-8"))
        assert c.get("/v1/schema/text-check-result").json() == published
        limits = c.get("/v1/info").json()["limits"]
        assert (limits["max_text_chars"], limits["max_text_claims"], limits["max_batch_claims"]) == (20000, 50, 100)
        assert {"/v1/check-text", "/v1/check-batch", "/v1/schema/text-check-result"} <= set(
            c.get("/openapi.json").json()["paths"]
        )


def test_without_llm_every_claim_has_no_verdict(retriever):
    with TestClient(make_app(retriever)) as c:
        events = sse_events(c.post("/v1/check-text", json={"text": TEXT}).text)
        claims = [d for e, d in events if e == "claim"]
        assert len(claims) == 3 and all(d["check"]["verdict"] is None and d["check"]["evidence"] for d in claims)
        assert events[-1] == (
            "summary",
            {
                "sentences": 5,
                "claims": 3,
                "labels": {"SUPPORTED": 0, "REFUTED": 0, "NOT_ENOUGH_INFO": 0},
                "without_verdict": 3,
                "failed": 0,
            },
        )


def test_a_text_without_claims_gives_an_empty_summary(retriever):
    with TestClient(make_app(retriever, LabelStubLLM())) as c:
        text = "Hello there! What do you think? I love this."
        events = sse_events(c.post("/v1/check-text", json={"text": text}).text)
        assert [e for e, _ in events] == ["claims", "summary"]
        assert events[0][1] == {"text": text, "sentences": 3, "claims": []}
        assert events[1][1]["claims"] == 0 and events[1][1]["failed"] == 0


def test_limits_and_bad_bodies(retriever):
    app = make_app(retriever, LabelStubLLM(), max_text_chars=300, max_text_claims=2, max_body_bytes=1024)
    with TestClient(app) as c:
        err = assert_error(c.post("/v1/check-text", json={"text": "a" * 301}), 422, "invalid_request")
        assert "301 characters" in err["message"] and "limit is 300" in err["message"]
        err = assert_error(c.post("/v1/check-text", json={"text": TEXT}), 422, "too_many_claims")
        assert "3 check-worthy claims" in err["message"] and "limit is 2" in err["message"]
        assert_error(c.post("/v1/check-text", json={"text": "x" * 2000}), 413, "body_too_large")
        assert_error(c.post("/v1/check-text", json={"text": " \n "}), 422, "invalid_request")
        assert_error(c.post("/v1/check-text", json={"text": ["a"]}), 422, "invalid_request")
        assert_error(c.post("/v1/check-text", json={"claim": "a"}), 422, "invalid_request")
        assert_error(c.post("/v1/check-text", json={"text": "a", "k": 3}), 422, "invalid_request")
        assert app.state.engine.pending == 0
        short = "Offshore wind farms drive fish away from the North Sea coast."
        assert sse_events(c.post("/v1/check-text", json={"text": short}).text)[-1][1]["claims"] == 1


def test_a_failing_claim_is_reported_and_the_stream_goes_on(retriever):
    with TestClient(make_app(retriever, ServeStubLLM(fail=True)), raise_server_exceptions=False) as c:
        events = sse_events(c.post("/v1/check-text", json={"text": TEXT}).text)
        assert [e for e, _ in events] == ["claims"] + ["claim_error"] * 3 + ["summary"]
        for i, (_, data) in enumerate(events[1:4]):
            assert data["index"] == i and TEXT[data["start"] : data["end"]] == data["claim"]
            assert data["error"]["code"] == "llm_error" and "RuntimeError" in data["error"]["message"]
        assert events[-1][1]["claims"] == 0 and events[-1][1]["failed"] == 3


def test_a_claim_past_the_timeout_is_reported_and_the_next_is_checked(retriever):
    gate = threading.Event()  # held: no claim can be answered in time
    app = make_app(retriever, ServeStubLLM(gate=gate), request_timeout_s=0.5)

    async def scenario() -> list[tuple[str, dict]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=120) as c:
            two = "Offshore wind farms drive fish away in 2020. Solar panels got 80% cheaper by 2020."
            return sse_events((await c.post("/v1/check-text", json={"text": two})).text)

    try:
        events = anyio.run(scenario)
    finally:
        gate.set()
    assert [e for e, _ in events] == ["claims", "claim_error", "claim_error", "summary"]
    assert {d["error"]["code"] for e, d in events if e == "claim_error"} == {"timeout"}
    assert app.state.engine.pending == 0


@pytest.mark.parametrize("path", ["/v1/check-text", "/v1/check-batch"])
def test_a_client_leaving_the_stream_stops_the_checking(retriever, path):
    """The client leaves after the first checked claim: the next claim's retrieval is abandoned, no verdict
    after the first is asked for, no summary is sent (uvicorn's ASGI spec 2.3: Starlette listens for the
    disconnect and cancels the stream)."""
    llm = ServeStubLLM()
    app = make_app(retriever, llm)
    body = {"text": TEXT} if path == "/v1/check-text" else {"claims": ["Wind farms drive fish away."] * 3}
    chunks: list[bytes] = []

    async def scenario() -> None:
        left = anyio.Event()
        requested = False

        async def receive() -> dict:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            chunks.append(message.get("body", b""))
            if b"event: claim\n" in chunks[-1] or b"event: result\n" in chunks[-1]:
                left.set()  # the first claim's result arrived: the client goes

        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},  # what uvicorn says
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"host", b"t")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        with anyio.fail_after(120):
            await app(scope, receive, send)

    anyio.run(scenario)
    events = [e for e, _ in sse_events(b"".join(chunks).decode())]
    assert events[-1] in {"claim", "result"} and events.count(events[-1]) == 1 and "summary" not in events
    assert llm.calls == 1  # three claims sent: only the first one's verdict was asked for
    assert app.state.engine.pending == 0


def test_the_serve_options_set_the_limits():
    def positive_int(name):
        def parse(value):
            if int(value) < 1:
                raise argparse.ArgumentTypeError(f"{name} must be >= 1")
            return int(value)

        return parse

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser, positive_int)
    args = parser.parse_args(["--max-text-chars", "900", "--max-text-claims", "7", "--max-batch-claims", "9"])
    s = settings_from_args(args)
    assert (s.max_text_chars, s.max_text_claims, s.max_batch_claims) == (900, 7, 9)
    assert settings_from_args(parser.parse_args([])) == ServeSettings(max_client_requests=2)  # half of 4 workers
    with pytest.raises(SystemExit):
        parser.parse_args(["--max-batch-claims", "0"])


def test_the_text_mode_script_is_served_and_writes_no_html(retriever):
    with TestClient(make_app(retriever, LabelStubLLM())) as c:
        page = c.get("/").text
        assert 'src="/static/text.js"' in page and 'id="tab-text"' in page and 'id="text-input"' in page
        js = c.get("/static/text.js")
        assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
        assert "script-src 'self'" in js.headers["content-security-policy"]
        assert "innerHTML" not in js.text.replace("never innerHTML", "") and "://" not in js.text
