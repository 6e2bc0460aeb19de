"""``carag serve`` as a real subprocess on 127.0.0.1, with a real small LLM (SmolLM2) in its worker
process: ``kill -9`` of the worker costs one request and a restart, never the server."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from tests.serve_helpers import LiveServer, build_demo_index
from tests.test_serve_worker import wait_until

CARAG = Path(sys.executable).parent / "carag"
CLAIM = "Offshore wind farms drive fish away."
LABELS = {"SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"}
#: Bound on one SmolLM2 verdict: a guard against a hang, not a speed target (on 2 busy cores a verdict took
#: 20-170 s; ~60 s is the first one after a restart; docs/SERVE.md has the measured recovery times).
VERDICT_S = 300
pytestmark = [pytest.mark.integration, pytest.mark.skipif(not CARAG.exists(), reason="no carag entry point")]


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    return build_demo_index(tmp_path_factory.mktemp("serve-e2e") / "index")


def request(server: LiveServer, path: str, body: dict | None = None, timeout: float = 60) -> tuple[int, Any, Any]:
    """``(status, headers (case-insensitive), JSON body)``; ``timeout`` bounds the wait for the answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read() or b"null")


def workers(server: LiveServer) -> list[dict]:
    return request(server, "/v1/info", timeout=5)[2]["llm_state"]["workers"]


def assert_unavailable(answer: tuple[int, Any, Any]) -> None:
    status, headers, body = answer
    assert status == 503 and body["error"]["code"] == "llm_unavailable", answer
    assert int(headers["Retry-After"]) >= 1


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_kill_9_of_the_llm_worker_costs_a_restart_not_the_server(index):
    server = LiveServer(index, "--llm", "smollm2", "--timeout", str(VERDICT_S))
    try:
        status, _, first = request(server, "/v1/check", {"claim": CLAIM}, timeout=VERDICT_S)
        assert status == 200 and first["verdict"]["label"] in LABELS
        (worker,) = workers(server)
        assert worker["state"] == "ready" and worker["restarts"] == 0

        os.kill(worker["pid"], signal.SIGKILL)
        assert request(server, "/healthz", timeout=5)[:1] == (200,)
        assert_unavailable(request(server, "/v1/check", {"claim": CLAIM}, timeout=30))  # while it restarts

        wait_until(lambda: workers(server)[0]["state"] == "ready", "the restarted worker", tries=3600)
        (restarted,) = workers(server)
        assert restarted["restarts"] == 1 and restarted["pid"] != worker["pid"] and not alive(worker["pid"])
        status, _, again = request(server, "/v1/check", {"claim": CLAIM}, timeout=VERDICT_S)
        assert status == 200 and again["verdict"]["label"] in LABELS
        assert again["evidence"] == first["evidence"]

        _kill_during_a_check(server)
        assert server.proc.poll() is None  # the server never exited
    finally:
        log = server.stop()
    assert "Traceback" not in log, log[-3000:]


def _kill_during_a_check(server: LiveServer) -> None:
    """A check whose worker is killed while it computes the verdict gets 503 + Retry-After."""
    wait_until(lambda: workers(server)[0]["state"] == "ready", "a ready worker", tries=3600)
    answers: list[Any] = []
    for _ in range(5):  # the verdict may finish before we look; then try again
        thread = threading.Thread(
            target=lambda: answers.append(
                request(server, "/v1/check", {"claim": CLAIM + " " + "Turbines and fish. " * 40}, timeout=VERDICT_S)
            )
        )
        thread.start()
        wait_until(lambda t=thread: not t.is_alive() or workers(server)[0]["busy"], "the check to reach the worker")
        (worker,) = workers(server)
        if worker["busy"]:
            os.kill(worker["pid"], signal.SIGKILL)
            thread.join(VERDICT_S)
            assert_unavailable(answers[-1])
            assert request(server, "/healthz", timeout=5)[:1] == (200,)
            return
        thread.join(VERDICT_S)
        assert answers[-1][0] == 200
    pytest.fail("no check was ever caught in the worker")


def test_stopping_the_server_stops_its_worker(index):
    server = LiveServer(index, "--llm-factory", "tests.serve_helpers:make_stub_llm")
    try:
        (worker,) = workers(server)
        assert worker["state"] == "ready" and alive(worker["pid"])
        status, _, body = request(server, "/v1/check", {"claim": CLAIM})
        assert status == 200 and body["verdict"]["label"] == "REFUTED"
    finally:
        server.stop()
    assert server.proc.returncode is not None
    wait_until(lambda: not alive(worker["pid"]), "the worker to exit with the server")


def test_llm_in_process_has_no_worker(index):
    server = LiveServer(index, "--llm-factory", "tests.serve_helpers:make_stub_llm", "--llm-in-process")
    try:
        info = request(server, "/v1/info")[2]
        assert info["llm"] == "serve-stub" and info["llm_state"] is None
        assert request(server, "/v1/check", {"claim": CLAIM})[2]["verdict"]["label"] == "REFUTED"
    finally:
        server.stop()
