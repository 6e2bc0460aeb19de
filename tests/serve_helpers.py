"""Test doubles and tools for the ``carag serve`` tests: a stub LLM, the demo index, a live server,
and a small Chrome DevTools Protocol client (stdlib only) driving headless Chromium."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
DEFAULT_ANSWER = "Verdict: REFUTED. Passage [1] contradicts the claim. Passage [2] agrees with it."
#: A prompt containing PROBE gets PROBE_ANSWER: markup that leaves a trace in the DOM if it ever runs.
PROBE = "XSS-PROBE"
PROBE_ANSWER = (
    "Verdict: SUPPORTED. <img src=x onerror=\"document.body.dataset.pwned='answer'\"> Passage [1] "
    "<script>document.body.dataset.pwned='answer-script'</script> says so."
)


class ServeStubLLM(CustomLLM):
    """A deterministic LLM: answers ``answer`` (streamed word by word).

    ``gate``: a ``threading.Event`` every call waits for (to hold requests in flight without timing);
    ``fail``: raise instead of answering.  ``calls`` counts completions.
    """

    answer: str = DEFAULT_ANSWER
    probe_answer: str = PROBE_ANSWER
    fail: bool = False
    gate: Any = None
    calls: int = 0
    entered: Any = None  # threading.Semaphore released once per call that started

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="serve-stub", context_window=32000, num_output=256)

    def _answer(self, prompt: str) -> str:
        return self.probe_answer if PROBE in prompt else self.answer

    def _start(self) -> None:
        self.calls += 1
        if self.entered is not None:
            self.entered.release()
        if self.gate is not None:
            self.gate.wait()
        if self.fail:
            raise RuntimeError("stub LLM failure")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self._start()
        return CompletionResponse(text=self._answer(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        self._start()
        answer = self._answer(prompt)

        def gen() -> CompletionResponseGen:
            text = ""
            for i, word in enumerate(answer.split(" ")):
                delta = word if i == 0 else " " + word
                text += delta
                yield CompletionResponse(text=text, delta=delta)

        return gen()


def make_stub_llm() -> ServeStubLLM:
    """``carag serve --llm-factory tests.serve_helpers:make_stub_llm`` (answer from ``CARAG_STUB_ANSWER``).

    A prompt with :data:`PROBE` in it (the claim, or evidence) is answered with :data:`PROBE_ANSWER`.
    """
    return ServeStubLLM(answer=os.environ.get("CARAG_STUB_ANSWER", DEFAULT_ANSWER))


#: In a prompt to :class:`CrashingStubLLM`: the worker process dies (SIGKILL / SIGSEGV) before answering.
CRASH, SEGFAULT = "LLM-CRASH-NOW", "LLM-SEGFAULT-NOW"
#: In a prompt to :class:`CrashingStubLLM`: the stream sends two words, then the worker dies.
CRASH_MID_STREAM = "LLM-CRASH-MID-STREAM"
#: In a prompt to :class:`CrashingStubLLM`: the call never returns (until the worker is killed).
HANG = "LLM-HANG-NOW"
#: Environment variables read by :func:`make_crashing_stub_llm` when a worker starts: while the file
#: named by HOLD_ENV exists, the start waits; if the file named by CRASH_ENV exists, the start dies.
HOLD_ENV, CRASH_ENV = "CARAG_TEST_HOLD_FILE", "CARAG_TEST_CRASH_FILE"


class CrashingStubLLM(ServeStubLLM):
    """:class:`ServeStubLLM` that kills its own process on :data:`CRASH` and friends (a stand-in for a
    native crash of llama.cpp inside an LLM worker process)."""

    def _answer(self, prompt: str) -> str:
        if CRASH in prompt:
            os.kill(os.getpid(), signal.SIGKILL)
        if SEGFAULT in prompt:
            os.kill(os.getpid(), signal.SIGSEGV)
        if HANG in prompt:
            threading.Event().wait()
        return super()._answer(prompt)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        words = self._answer(prompt).split(" ")

        def gen() -> CompletionResponseGen:
            text = ""
            for i, word in enumerate(words):
                if i == 2 and CRASH_MID_STREAM in prompt:
                    os.kill(os.getpid(), signal.SIGKILL)
                delta = word if i == 0 else " " + word
                text += delta
                yield CompletionResponse(text=text, delta=delta)

        return gen()


def make_crashing_stub_llm() -> CrashingStubLLM:
    """``--llm-factory tests.serve_helpers:make_crashing_stub_llm`` (see :data:`HOLD_ENV`, :data:`CRASH_ENV`)."""
    hold, crash = os.environ.get(HOLD_ENV), os.environ.get(CRASH_ENV)
    if crash and Path(crash).exists():
        os.kill(os.getpid(), signal.SIGKILL)
    waited = threading.Event()
    for _ in range(6000):  # at most ~5 minutes: a test that forgets its file still ends
        if not (hold and Path(hold).exists()):
            break
        waited.wait(0.05)
    return CrashingStubLLM()


#: Evidence passages whose text (and one id) carry markup that marks the DOM if it ever runs.
HOSTILE_PASSAGES = {  # on a topic of their own, so that only the probe claim retrieves them
    "xss-img": f"{PROBE} the glass teapot orbit <img src=x onerror=\"document.body.dataset.pwned='evidence'\"> lattice.",
    "xss-script": f"{PROBE} the glass teapot <script>document.body.dataset.pwned='evidence-script'</script> orbit.",
    "xss-table": f"{PROBE} teapot orbit </td></tr></table><b id=pwn>broken out</b> glass lattice.",
    "xss-rtl <i>id</i>": f"{PROBE} \u202eRTL override\u202c \u05e8\u05d5\u05d7 glass teapot orbit \U0001fad6.",
    # longer than one of the verifier's chunks: its stance is read from an excerpt, which the page marks
    "xss-long": " ".join(
        f"{PROBE} The glass teapot orbit was logged on night {i} by the lattice survey." for i in range(6)
    )
    + " The glass teapot (a|b)* [1] $x+? \\d <b id=pwn>orbits</b> the lattice"
    + " <img src=x onerror=\"document.body.dataset.pwned='evidence'\">.",
}


def build_demo_index(out: Path, *, hostile: bool = False, **kwargs: Any) -> Path:
    """Index the demo corpus (plus :data:`HOSTILE_PASSAGES` when ``hostile``) with MiniLM; persist to ``out``."""
    from llama_index.core.schema import TextNode

    from llama_index_carag.datasets import load_demo_corpus
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever

    corpus = load_demo_corpus()
    nodes = list(corpus.evidence_nodes)
    if hostile:
        nodes += [TextNode(id_=node_id, text=text) for node_id, text in HOSTILE_PASSAGES.items()]
    settings = {"n_clusters": 3, "delta": 0.5, **kwargs}
    retriever = ContextAwareRetriever.from_defaults(
        nodes, claim_nodes=corpus.claim_nodes, embed_model="minilm", id_map=True, **settings
    )
    retriever.persist(out, persist_index=True)
    return out


# --------------------------------------------------------------------------- the app in process
def make_app(
    retriever: Any, llm: ServeStubLLM | None = None, clock: Any = None, decision: str = "llm", **settings: Any
) -> Any:
    """``create_app`` on ``retriever`` with ``llm`` for verdicts, streams and chat (None: retrieval only); by default
    the stub LLM's own label decides (``decision="llm"``), so each test controls the label through its answer."""
    from llama_index_carag.serve import ServeSettings, create_app
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    if llm is None:
        return create_app(retriever, settings=ServeSettings(**settings))
    return create_app(
        retriever,
        FactCheckSynthesizer(llm, decision=decision),
        stream_synthesizer=FactCheckSynthesizer(llm, streaming=True, decision=decision),
        llm=llm,
        settings=ServeSettings(**settings),
        clock=clock,
    )


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``(event, data)`` of a whole ``text/event-stream`` body."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    """The error object of ``response``, asserting its status, its one-key shape and its code."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"], body
    return body["error"]


# --------------------------------------------------------------------------- live server
class LiveServer:
    """``carag serve`` in a subprocess on 127.0.0.1 with a free port (``--port 0``; the URL is read from stdout)."""

    def __init__(self, index: Path, *args: str, env: dict[str, str] | None = None, start_timeout: float = 240) -> None:
        carag = Path(sys.executable).parent / "carag"
        cmd = [str(carag), "serve", "--index", str(index), "--host", "127.0.0.1", "--port", "0", *args]
        full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives as long as the server; a file, not a pipe: a chatty server never blocks
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log, text=True, env=full_env)
        self.url = self._read_url(start_timeout)

    def _read_url(self, timeout: float) -> str:
        found: list[str] = []
        done = threading.Event()

        def read() -> None:
            for line in self.proc.stdout:
                if line.startswith("carag serve: http://"):
                    found.append(line.split()[2])
                    break
            done.set()

        threading.Thread(target=read, daemon=True).start()
        if not done.wait(timeout) or not found:
            self.stop()
            raise RuntimeError(f"carag serve did not start: {self.stop()[-3000:]}")
        return found[0].rstrip("/")

    def get(self, path: str) -> tuple[int, dict[str, str], bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=60) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.log.seek(0)
        return self.log.read()


# --------------------------------------------------------------------------- Chromium over CDP
class _WebSocket:
    """A minimal RFC 6455 client: text frames, masking, fragmentation, ping/pong (enough for CDP)."""

    def __init__(self, url: str, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"DevTools refused the websocket: {head[:200]!r}")
        self.buffer = head.split(b"\r\n\r\n", 1)[1]

    def _exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def send(self, text: str, opcode: int = 1) -> None:
        data = text.encode() if isinstance(text, str) else text
        header = bytes([0x80 | opcode])
        n = len(data)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + n.to_bytes(2, "big")
        else:
            header += bytes([0x80 | 127]) + n.to_bytes(8, "big")
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self) -> str:
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self._exact(2), "big")
            elif n == 127:
                n = int.from_bytes(self._exact(8), "big")
            mask = self._exact(4) if b1 & 0x80 else None
            payload = self._exact(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            opcode = b0 & 0x0F
            if opcode == 9:
                self.send(payload.decode("latin-1"), opcode=10)
                continue
            if opcode == 8:
                raise ConnectionError("DevTools closed the websocket")
            message += payload
            if b0 & 0x80:
                return message.decode()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


#: Records CSP violations in ``window.__csp`` (added to every page before its own scripts).
CSP_RECORDER = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
"""


class Chromium:
    """Headless Chromium with one page, driven over the DevTools protocol.

    ``timeout`` bounds each protocol call (a guard against a hang, not a measurement).
    """

    def __init__(self, profile: Path, timeout: float = 120, width: int = 1280, height: int = 1400) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives as long as Chromium;; a pipe could fill and block it
        self.proc = subprocess.Popen(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-sync",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-extensions",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            text=True,
        )
        port = self._port(profile / "DevToolsActivePort", timeout)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        self.ws = _WebSocket(pages[0]["webSocketDebuggerUrl"], timeout)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _port(self, path: Path, timeout: float) -> int:
        done = threading.Event()
        while not done.wait(0.1):
            if self.proc.poll() is not None:
                self._log.seek(0)
                raise RuntimeError(f"chromium exited: {self._log.read()[-2000:]}")
            if path.is_file() and path.read_text().strip():
                return int(path.read_text().split()[0])
            timeout -= 0.1
            if timeout <= 0:
                raise RuntimeError("chromium did not open its DevTools port")
        raise AssertionError("unreachable")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` (promises awaited); a page exception raises."""
        out = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in out:
            raise RuntimeError(f"page error: {out['exceptionDetails']}")
        return out["result"].get("value")

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'")

    def wait_for(self, condition: str) -> None:
        """Resolve when the JS ``condition`` holds, checked on every DOM change (no sleeping in Python)."""
        self.evaluate(
            "new Promise(resolve => { const ok = () => { try { return ("
            + condition
            + "); } catch (e) { return false; } };"
            " if (ok()) return resolve(true);"
            " const obs = new MutationObserver(() => { if (ok()) { obs.disconnect(); resolve(true); } });"
            " obs.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});"
            " document.addEventListener('readystatechange', () => { if (ok()) resolve(true); }); })"
        )

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def console_errors(self) -> list[str]:
        out = []
        for e in self.events:
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(str(e["params"]["exceptionDetails"].get("text")))
            elif e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error":
                out.append(f"{e['params']['entry'].get('text')} {e['params']['entry'].get('url', '')}")
        return out

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
