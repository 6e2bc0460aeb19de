"""The LLM in supervised worker processes (``serve/llm_pool.py``, ``serve/llm_worker.py``): a worker that
dies mid-request gives 503 ``llm_unavailable`` with ``Retry-After``, is restarted, and chat sessions
keep their turns.  The worker runs :class:`tests.serve_helpers.CrashingStubLLM`, which kills its own
process when a prompt contains a marker — deterministic, no sleeping to provoke anything.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from llama_index_carag.retrieval.retriever import ContextAwareRetriever
from llama_index_carag.serve import ServeSettings, create_app
from llama_index_carag.serve.llm_pool import (
    LLMCallTimeout,
    LLMPool,
    LLMStartupError,
    LLMUnavailable,
    restart_delay,
)
from llama_index_carag.serve.llm_worker import LLMWorkerSpec
from llama_index_carag.verdicts.check import check_claim
from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer
from tests.serve_helpers import (
    CRASH,
    CRASH_ENV,
    CRASH_MID_STREAM,
    DEFAULT_ANSWER,
    HANG,
    HOLD_ENV,
    PROBE,
    PROBE_ANSWER,
    ROOT,
    SEGFAULT,
    ServeStubLLM,
    sse_events,
)

CLAIM = "Offshore wind farms drive fish away."
FACTORY = "tests.serve_helpers:make_crashing_stub_llm"
pytestmark = pytest.mark.integration


def wait_until(condition, what: str, tries: int = 1200) -> None:
    """Poll ``condition`` every 0.05 s, at most ``tries`` times (a bound against a hang, not a measurement)."""
    pause = threading.Event()
    for _ in range(tries):
        if condition():
            return
        pause.wait(0.05)
    raise AssertionError(f"gave up waiting for {what}")


def worker_states(pool: LLMPool) -> list[str]:
    return [w["state"] for w in pool.state()["workers"]]


def wait_ready(pool: LLMPool) -> None:
    wait_until(lambda: "ready" in worker_states(pool), "a ready LLM worker")


@pytest.fixture(scope="module")
def switches(tmp_path_factory) -> dict[str, Path]:
    """Files the workers' factory looks for when a worker starts (hold the start; die at start)."""
    folder = tmp_path_factory.mktemp("switches")
    files = {HOLD_ENV: folder / "hold", CRASH_ENV: folder / "crash"}
    saved = {k: os.environ.get(k) for k in files}
    os.environ.update({k: str(v) for k, v in files.items()})  # inherited by the workers when they start
    yield {"hold": files[HOLD_ENV], "crash": files[CRASH_ENV]}
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def pool(switches):
    with LLMPool(LLMWorkerSpec(llm_factory=FACTORY), call_timeout_s=3, backoff_s=0.1, max_backoff_s=0.5).start(
        300
    ) as p:
        yield p


@pytest.fixture()
def ready_pool(pool, switches):
    for f in switches.values():
        f.unlink(missing_ok=True)
    wait_ready(pool)
    return pool


@pytest.fixture(scope="module")
def retriever(demo_index, demo_corpus):
    return ContextAwareRetriever.from_index(
        demo_index, "paper", claim_nodes=demo_corpus.claim_nodes, n_clusters=3, delta=0.5
    )


@pytest.fixture()
def client(ready_pool, retriever):
    app = create_app(retriever, llm_pool=ready_pool, settings=ServeSettings(request_timeout_s=30))
    with TestClient(app) as c:
        yield c


def assert_unavailable(response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "llm_unavailable" and response.json()["error"]["message"]
    assert int(response.headers["retry-after"]) >= 1


def only_pid(client) -> int:
    workers = client.get("/v1/info").json()["llm_state"]["workers"]
    assert len(workers) == 1 and workers[0]["state"] == "ready"
    return workers[0]["pid"]


# ------------------------------------------------------------------ the pool itself
def test_restart_delay_doubles_up_to_the_cap():
    assert [restart_delay(n, 1.0, 5.0) for n in range(1, 7)] == [0.0, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_pool_calls_and_a_crash_fails_only_the_call_in_flight(ready_pool):
    assert ready_pool.info["name"] == "serve-stub" and ready_pool.info["metadata"]["context_window"] == 32000
    assert ready_pool.call("complete", "hello", False, {}).text == DEFAULT_ANSWER
    before = ready_pool.state()["workers"][0]
    with pytest.raises(LLMUnavailable) as err:
        ready_pool.call("complete", f"please {CRASH}", False, {})
    assert err.value.retry_after_s >= 1 and "SIGKILL" in str(err.value)
    wait_ready(ready_pool)
    after = ready_pool.state()["workers"][0]
    assert after["restarts"] == before["restarts"] + 1 and after["pid"] != before["pid"]
    assert ready_pool.call("complete", PROBE, False, {}).text == PROBE_ANSWER


def test_a_cancelled_stream_leaves_no_stale_reply(ready_pool):
    stream = ready_pool.stream("stream_complete", "hello", False, {})
    assert next(stream).delta == DEFAULT_ANSWER.split(" ")[0]
    stream.close()  # the rest of that answer must never reach the next request
    assert ready_pool.call("complete", PROBE, False, {}).text == PROBE_ANSWER
    pieces = list(ready_pool.stream("stream_complete", PROBE, False, {}))
    assert "".join(p.delta for p in pieces) == PROBE_ANSWER


def test_a_call_past_the_timeout_restarts_its_worker(ready_pool):
    pid = ready_pool.state()["workers"][0]["pid"]
    with pytest.raises(LLMCallTimeout):
        ready_pool.call("complete", HANG, False, {})
    wait_ready(ready_pool)
    assert ready_pool.state()["workers"][0]["pid"] != pid
    assert ready_pool.call("complete", "hello", False, {}).text == DEFAULT_ANSWER


def test_a_worker_that_keeps_dying_at_start_is_retried(ready_pool, switches):
    switches["crash"].touch()
    restarts = ready_pool.state()["workers"][0]["restarts"]
    with pytest.raises(LLMUnavailable):
        ready_pool.call("complete", CRASH, False, {})
    wait_until(lambda: ready_pool.state()["workers"][0]["restarts"] >= restarts + 3, "repeated restarts")
    with pytest.raises(LLMUnavailable):
        ready_pool.check_available()
    switches["crash"].unlink()
    wait_ready(ready_pool)
    assert ready_pool.call("complete", "hello", False, {}).text == DEFAULT_ANSWER


def test_a_factory_that_fails_is_a_startup_error():
    with pytest.raises(LLMStartupError, match="not a LlamaIndex LLM"):
        LLMPool(LLMWorkerSpec(llm_factory="os:getcwd")).start(300)


def test_close_and_parent_death_leave_no_worker(tmp_path):
    script = tmp_path / "owner.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, threading
        sys.path.insert(0, {str(ROOT)!r})
        from llama_index_carag.serve.llm_pool import LLMPool
        from llama_index_carag.serve.llm_worker import LLMWorkerSpec
        if __name__ == "__main__":
            pool = LLMPool(LLMWorkerSpec(llm_factory={FACTORY!r})).start(300)
            print(pool.state()["workers"][0]["pid"], flush=True)
            threading.Event().wait()
    """)
    )
    owner = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        child = int(owner.stdout.readline())
        os.kill(owner.pid, signal.SIGKILL)  # no chance to clean up: the worker must notice by itself
        owner.wait(30)
        wait_until(lambda: not _alive(child), f"worker {child} to exit after its parent died")
    finally:
        owner.kill()
        owner.wait(30)
    with LLMPool(LLMWorkerSpec(llm_factory=FACTORY)).start(300) as pool:
        pid = pool.state()["workers"][0]["pid"]
    assert not _alive(pid) and worker_states(pool) == ["dead"]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has exited; its parent (pytest's reaper or init) will reap it


# ------------------------------------------------------------------ through the HTTP API
def test_check_crash_is_503_then_the_same_verdict_as_in_process(client, ready_pool, retriever):
    pid = only_pid(client)
    assert_unavailable(client.post("/v1/check", json={"claim": f"{CLAIM} {SEGFAULT}"}))
    assert client.get("/healthz").json() == {"status": "ok"}
    wait_ready(ready_pool)
    assert only_pid(client) != pid
    got = client.post("/v1/check", json={"claim": CLAIM})
    assert got.status_code == 200
    assert got.json() == check_claim(retriever, CLAIM, FactCheckSynthesizer(ServeStubLLM())).to_json_dict()
    assert got.json()["verdict"]["label"] == "REFUTED"


def test_stream_crash_ends_with_an_llm_unavailable_event(client, ready_pool):
    events = sse_events(client.post("/v1/check/stream", json={"claim": f"{CLAIM} {CRASH_MID_STREAM}"}).text)
    assert [e for e, _ in events] == ["evidence", "token", "token", "error"]
    assert events[-1][1]["error"]["code"] == "llm_unavailable"
    wait_ready(ready_pool)
    events = sse_events(client.post("/v1/check/stream", json={"claim": CLAIM}).text)
    assert [e for e, _ in events][-2:] == ["verdict", "done"]
    assert "".join(d["text"] for e, d in events if e == "token") == DEFAULT_ANSWER


def test_chat_session_survives_a_crash_of_its_llm(client, ready_pool):
    sid = client.post("/v1/sessions").json()["session_id"]
    first = client.post(f"/v1/sessions/{sid}/messages", json={"message": CLAIM})
    assert first.status_code == 200 and first.json()["text"] == DEFAULT_ANSWER
    assert_unavailable(client.post(f"/v1/sessions/{sid}/messages", json={"message": f"Why? {CRASH}"}))
    assert [t["message"] for t in client.get(f"/v1/sessions/{sid}").json()["turns"]] == [CLAIM]
    wait_ready(ready_pool)
    second = client.post(f"/v1/sessions/{sid}/messages", json={"message": "Why?"})
    assert second.status_code == 200 and second.json()["turn"] == 2
    assert [t["message"] for t in client.get(f"/v1/sessions/{sid}").json()["turns"]] == [CLAIM, "Why?"]
    history = client.app.state.sessions.get(sid).history  # the memory lives in the server
    assert [message for message, _ in history] == [CLAIM, "Why?"] and all(answer for _, answer in history)


def test_while_no_worker_is_ready_llm_requests_get_503_at_once(client, ready_pool, switches):
    sid = client.post("/v1/sessions").json()["session_id"]
    switches["hold"].touch()  # the restarted worker waits in its factory until the file goes
    assert_unavailable(client.post("/v1/check", json={"claim": CRASH}))
    wait_until(lambda: worker_states(ready_pool) == ["starting"], "the worker to be starting")
    assert_unavailable(client.post("/v1/check", json={"claim": CLAIM}))
    assert_unavailable(client.post("/v1/check/stream", json={"claim": CLAIM}))
    assert_unavailable(client.post(f"/v1/sessions/{sid}/messages", json={"message": CLAIM}))
    assert client.get("/healthz").status_code == 200
    assert client.post("/v1/graph", json={"claim": CLAIM}).status_code == 200  # no LLM needed
    assert client.post("/v1/sessions").status_code == 201  # sessions need no worker until they ask
    info = client.get("/v1/info").json()
    assert info["llm"] == "serve-stub" and info["llm_state"]["workers"][0]["state"] == "starting"
    switches["hold"].unlink()
    wait_ready(ready_pool)
    assert client.post("/v1/check", json={"claim": CLAIM}).json()["verdict"]["label"] == "REFUTED"
    assert client.post(f"/v1/sessions/{sid}/messages", json={"message": CLAIM}).status_code == 200


def test_timeout_is_504_and_the_next_check_gets_its_own_verdict(ready_pool, retriever):
    app = create_app(retriever, llm_pool=ready_pool, settings=ServeSettings(request_timeout_s=3))
    with TestClient(app) as c:
        err = c.post("/v1/check", json={"claim": f"{CLAIM} {HANG}"})
        assert err.status_code == 504 and err.json()["error"]["code"] == "timeout"
        wait_until(
            lambda: not ready_pool.state()["workers"][0]["busy"] and "ready" in worker_states(ready_pool),
            "the hung worker to be replaced",
        )
        probe = c.post("/v1/check", json={"claim": f"{CLAIM} {PROBE}"})
        assert probe.status_code == 200 and probe.json()["verdict"]["raw"] == PROBE_ANSWER  # its own answer


def test_create_app_refuses_a_pool_with_in_process_objects(ready_pool, retriever):
    with pytest.raises(ValueError, match="not both"):
        create_app(retriever, llm=ServeStubLLM(), llm_pool=ready_pool)
