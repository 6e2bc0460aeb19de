"""``POST /v1/check-batch`` through the real app (FastAPI), on the demo index, with stub LLMs: one
``/v1/check`` result per claim in order, a bad item reported and never fatal, the size limit, and the
stream counted as one request against ``max_pending`` (held by an Event, never by timing).
"""

from __future__ import annotations

import threading

import anyio
import httpx
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from llama_index_carag.retrieval.retriever import ContextAwareRetriever
from llama_index_carag.verdicts.bulk import check_claims
from llama_index_carag.verdicts.check import CheckResult, ClaimChecker
from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer
from tests.serve_helpers import ServeStubLLM, assert_error, make_app, sse_events
from tests.serve_text_helpers import LabelStubLLM

pytestmark = pytest.mark.integration
WIND, SOLAR, OTHER = (
    "Offshore wind farms drive fish away.",
    "The cost of solar panels has fallen sharply.",
    "Heat pumps fail below freezing.",
)


@pytest.fixture(scope="module")
def retriever(demo_index, demo_corpus):
    return ContextAwareRetriever.from_index(
        demo_index, "paper", claim_nodes=demo_corpus.claim_nodes, n_clusters=3, delta=0.5
    )


def test_one_result_per_claim_in_order_and_bad_items_reported(retriever):
    items = [WIND, 3, "", SOLAR, None, "x" * 101, {"claim": OTHER}, "\x00", OTHER]
    with TestClient(make_app(retriever, LabelStubLLM(), max_claim_chars=100)) as c:
        response = c.post("/v1/check-batch", json={"claims": items})
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response.text)
        assert [e for e, _ in events] == [
            "result",
            "claim_error",
            "claim_error",
            "result",
            "claim_error",
            "claim_error",
            "claim_error",
            "claim_error",
            "result",
            "summary",
        ]
        assert [d["index"] for _, d in events[:-1]] == list(range(len(items)))
        results = [d for e, d in events if e == "result"]
        for d in results:  # the /v1/check result of the same claim
            body = {k: v for k, v in d.items() if k != "index"}
            CheckResult.model_validate(body)
            assert body == c.post("/v1/check", json={"claim": d["claim"]}).json()
        # and what check_claims (carag check --claims) gives for the good ones, in order
        checker = ClaimChecker(retriever, FactCheckSynthesizer(LabelStubLLM(), decision="llm"))
        expected = list(check_claims(checker, [WIND, SOLAR, OTHER]))
        assert [{k: v for k, v in d.items() if k != "index"} for d in results] == [
            {k: v for k, v in r.items() if k not in ("line", "id")} for r in expected
        ]
        assert [d["verdict"]["label"] for d in results] == ["REFUTED", "SUPPORTED", "NOT_ENOUGH_INFO"]
        errors = {d["index"]: (d["claim"], d["error"]) for e, d in events if e == "claim_error"}
        assert {i: e["code"] for i, (_, e) in errors.items()} == dict.fromkeys([1, 2, 4, 5, 6, 7], "invalid_request")
        assert errors[1] == (3, {"code": "invalid_request", "message": "claims[1]: is a JSON number, not a string"})
        assert errors[4][1]["message"] == "claims[4]: is a JSON null, not a string"
        assert "101 characters" in errors[5][1]["message"] and "limit is 100" in errors[5][1]["message"]
        assert errors[6][0] == {"claim": OTHER} and "JSON object" in errors[6][1]["message"]
        assert "empty" in errors[7][1]["message"]
        assert events[-1][1] == {
            "items": 9,
            "checked": 3,
            "failed": 6,
            "labels": {"SUPPORTED": 1, "REFUTED": 1, "NOT_ENOUGH_INFO": 1},
            "without_verdict": 0,
        }


def test_the_size_limit_and_bad_bodies(retriever):
    app = make_app(retriever, LabelStubLLM(), max_batch_claims=3)
    with TestClient(app) as c:
        err = assert_error(c.post("/v1/check-batch", json={"claims": [WIND] * 4}), 422, "too_many_claims")
        assert "4 items" in err["message"] and "limit is 3" in err["message"]
        assert_error(c.post("/v1/check-batch", json={"claims": []}), 422, "invalid_request")
        assert_error(c.post("/v1/check-batch", json={"claims": WIND}), 422, "invalid_request")
        assert_error(c.post("/v1/check-batch", json={"claim": WIND}), 422, "invalid_request")
        assert_error(c.post("/v1/check-batch", json={"claims": [WIND], "k": 1}), 422, "invalid_request")
        assert_error(
            c.post("/v1/check-batch", content=b'{"claims": [', headers={"content-type": "application/json"}),
            400,
            "invalid_json",
        )
        events = sse_events(c.post("/v1/check-batch", json={"claims": [WIND] * 3}).text)
        assert [e for e, _ in events] == ["result"] * 3 + ["summary"]
        assert app.state.engine.pending == 0


def test_an_llm_failure_fails_its_item_not_the_batch(retriever):
    with TestClient(make_app(retriever, ServeStubLLM(fail=True)), raise_server_exceptions=False) as c:
        events = sse_events(c.post("/v1/check-batch", json={"claims": [WIND, 7, SOLAR]}).text)
        assert [(e, d["error"]["code"]) for e, d in events[:-1]] == [
            ("claim_error", "llm_error"),
            ("claim_error", "invalid_request"),
            ("claim_error", "llm_error"),
        ]
        assert events[-1][1]["failed"] == 3 and events[-1][1]["checked"] == 0


def test_without_llm_results_have_no_verdict(retriever):
    with TestClient(make_app(retriever)) as c:
        events = sse_events(c.post("/v1/check-batch", json={"claims": [WIND, SOLAR]}).text)
        assert [d["verdict"] for e, d in events if e == "result"] == [None, None]
        assert events[-1][1]["without_verdict"] == 2 and events[-1][1]["checked"] == 2


def test_a_batch_in_flight_is_one_admitted_request(retriever):
    gate, entered = threading.Event(), threading.Semaphore(0)
    app = make_app(retriever, ServeStubLLM(gate=gate, entered=entered), max_pending=1)

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=120) as c:
            out: list[httpx.Response] = []
            async with anyio.create_task_group() as tg:

                async def batch() -> None:
                    out.append(await c.post("/v1/check-batch", json={"claims": [WIND, SOLAR]}))

                tg.start_soon(batch)
                await anyio.to_thread.run_sync(entered.acquire)  # the first claim is with the LLM
                assert app.state.engine.pending == 1
                busy = await c.post("/v1/check", json={"claim": WIND})
                assert_error(busy, 503, "busy")
                assert_error(await c.post("/v1/check-batch", json={"claims": [WIND]}), 503, "busy")
                gate.set()
            events = sse_events(out[0].text)
            assert [e for e, _ in events] == ["result", "result", "summary"]
            assert app.state.engine.pending == 0

    try:
        anyio.run(scenario)
    finally:
        gate.set()
