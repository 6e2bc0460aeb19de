"""Load on ``carag serve``: N concurrent ``/v1/check`` (and ``/v1/check/stream``) against a live server.

    python benchmarks/bench_serve.py                       # 200 concurrent, stub LLM, demo index
    python benchmarks/bench_serve.py --requests 500 --concurrency 100
    python benchmarks/bench_serve.py --llm smollm2 --requests 20 --concurrency 20 --baseline 5 --no-stream

The server is the real ``carag serve`` in a subprocess on 127.0.0.1 (a free port), on the demo
index (built once into ``--index`` if missing).  With ``--llm stub`` it answers through
:func:`make_stub_llm` (a fixed, parseable answer: the load is the HTTP stack, retrieval and
the verdict parser).  Every response is checked against a sequential run of the same claim:
a figure counts only if the answers under load are the answers without load.

Printed: sequential latency (concurrency 1), then per phase the status codes, wall time,
throughput, latency p50/p90/p99/max, time to the first stream event, and the server's peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

from _common import REPO, machine, table

STUB_ANSWER = "Verdict: REFUTED. Passage [1] contradicts the claim. Passage [2] is about another topic."


def make_stub_llm() -> Any:
    """``--llm-factory benchmarks.bench_serve:make_stub_llm``: a fixed answer, streamed word by word."""
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
    from llama_index.core.llms.callbacks import llm_completion_callback

    class BenchStubLLM(CustomLLM):
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="bench-stub", context_window=32000, num_output=256)

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            return CompletionResponse(text=STUB_ANSWER)

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            def gen() -> Any:
                text = ""
                for i, word in enumerate(STUB_ANSWER.split(" ")):
                    delta = word if i == 0 else " " + word
                    text += delta
                    yield CompletionResponse(text=text, delta=delta)

            return gen()

    return BenchStubLLM()


def make_named_llm() -> Any:
    """``--llm-factory benchmarks.bench_serve:make_named_llm``: ``resolve_llm($CARAG_BENCH_LLM)``."""
    from llama_index_carag.models.resolve import resolve_llm

    return resolve_llm(os.environ["CARAG_BENCH_LLM"])


def ensure_index(path: Path) -> Path:
    if (path / "carag").is_dir():
        return path
    from llama_index_carag.datasets import load_demo_corpus
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever

    corpus = load_demo_corpus()
    retriever = ContextAwareRetriever.from_defaults(
        corpus.evidence_nodes,
        claim_nodes=corpus.claim_nodes,
        embed_model="minilm",
        id_map=True,
        n_clusters=3,
        delta=0.5,
    )
    retriever.persist(path, persist_index=True)
    return path


def start_server(index: Path, args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    factory = "make_stub_llm" if args.llm == "stub" else "make_named_llm"
    llm = ["--llm-factory", f"benchmarks.bench_serve:{factory}"]
    cmd = [
        str(Path(sys.executable).parent / "carag"),
        "serve",
        "--index",
        str(index),
        "--port",
        "0",
        "--host",
        "127.0.0.1",
        "--max-pending",
        str(args.max_pending or max(256, args.concurrency)),
        "--retrieval-workers",
        str(args.workers),
        "--timeout",
        str(args.timeout),
        *llm,
    ]
    env = {**os.environ, "CARAG_BENCH_LLM": args.llm}
    if args.server_threads:
        env.update(OMP_NUM_THREADS=str(args.server_threads), MKL_NUM_THREADS=str(args.server_threads))
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True, env=env)
    for line in proc.stdout:
        if line.startswith("carag serve: http://"):
            return proc, line.split()[2].rstrip("/")
    raise RuntimeError("carag serve did not start")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def one_check(client: Any, claim: str) -> tuple[int, float, dict | None]:
    t0 = time.perf_counter()
    r = await client.post("/v1/check", json={"claim": claim})
    if r.status_code == 503 and "retry-after" not in r.headers:
        return 598, time.perf_counter() - t0, r.json()  # a 503 must say when to retry
    return r.status_code, time.perf_counter() - t0, r.json()


async def poll_health(url: str, stop: asyncio.Event, latencies: list[float]) -> None:
    """``GET /healthz`` every 100 ms on its own connection until ``stop``; records each latency (inf on error)."""
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                ok = (await client.get("/healthz")).status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - t0 if ok else float("inf"))
            try:
                await asyncio.wait_for(stop.wait(), 0.1)
            except asyncio.TimeoutError:
                pass


async def one_stream(client: Any, claim: str) -> tuple[int, float, float, dict | None]:
    t0 = time.perf_counter()
    first = None
    done = None
    async with client.stream("POST", "/v1/check/stream", json={"claim": claim}) as r:
        event = None
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
                first = first or time.perf_counter() - t0
            elif line.startswith("data: ") and event in ("done", "error"):
                done = json.loads(line[6:])
                if event == "error":
                    return 599, time.perf_counter() - t0, first or 0.0, done
    return r.status_code, time.perf_counter() - t0, first or 0.0, done


def percentiles(values: list[float]) -> list[str]:
    if not values:
        return ["-"] * 4
    s = sorted(values)
    pick = lambda q: s[min(len(s) - 1, int(round(q * (len(s) - 1))))]  # noqa: E731
    return [f"{pick(q) * 1000:.0f}" for q in (0.5, 0.9, 0.99)] + [f"{s[-1] * 1000:.0f}"]


def _client(url: str, args: argparse.Namespace) -> Any:
    """A fresh client per phase: no keep-alive connection left idle past the server's keep-alive timeout."""
    import httpx

    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    return httpx.AsyncClient(base_url=url, timeout=args.timeout + 60, limits=limits)


async def _guarded(fn: Any, client: Any, claim: str, sem: asyncio.Semaphore) -> Any:
    """``fn(client, claim)``; a transport error counts as status 0 instead of ending the run."""
    import httpx

    async with sem:
        try:
            return await fn(client, claim)
        except httpx.TransportError as exc:
            return (0, 0.0, {"error": repr(exc)}) if fn is one_check else (0, 0.0, 0.0, {"error": repr(exc)})


async def run(url: str, claims: list[str], args: argparse.Namespace) -> list[list[str]]:
    rows: list[list[str]] = []
    expected: dict[str, dict] = {}
    seq: list[float] = []
    async with _client(url, args) as client:
        for claim in claims:  # sequential baseline, one request at a time (also the reference answers)
            status, dt, body = await one_check(client, claim)
            if status != 200:
                raise RuntimeError(f"sequential check failed: {status} {body}")
            expected[claim] = body
            seq.append(dt)
    rows.append(
        [
            "sequential /v1/check",
            str(len(claims)),
            "1",
            f"200×{len(claims)}",
            f"{sum(seq):.2f}",
            f"{len(claims) / sum(seq):.2f}",
            *percentiles(seq),
            "-",
            "-",
        ]
    )
    batch = [claims[i % len(claims)] for i in range(args.requests)]
    sem = asyncio.Semaphore(args.concurrency)
    for name, fn in (("concurrent /v1/check", one_check), ("concurrent /v1/check/stream", one_stream)):
        if fn is one_stream and args.no_stream:
            continue
        health: list[float] = []
        stop = asyncio.Event()
        poller = asyncio.create_task(poll_health(url, stop, health))
        async with _client(url, args) as client:
            t0 = time.perf_counter()
            results = await asyncio.gather(*(_guarded(fn, client, c, sem) for c in batch))
            wall = time.perf_counter() - t0
        stop.set()
        await poller
        codes = Counter(r[0] for r in results)
        wrong = sum(1 for c, r in zip(batch, results) if r[0] == 200 and r[-1] != expected[c])
        ok = [r[1] for r in results if r[0] == 200]
        first = [r[2] for r in results if r[0] == 200] if fn is one_stream else []
        rows.append(
            [
                name,
                str(args.requests),
                str(args.concurrency),
                _codes(codes, wrong),
                f"{wall:.2f}",
                f"{len(ok) / wall:.2f}",
                *percentiles(ok),
                f"{statistics.median(first) * 1000:.0f}" if first else "-",
                f"{_p95_ms(health)} ({len(health)})" if health else "-",
            ]
        )
    return rows


def _p95_ms(values: list[float]) -> str:
    s = sorted(values)
    return f"{s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))] * 1000:.0f}"


def _codes(codes: Counter, wrong: int) -> str:
    text = " ".join(f"{code}×{n}" for code, n in sorted(codes.items()))
    return text + (f" ({wrong} differ from sequential!)" if wrong else "")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--index",
        default=str(Path(tempfile.gettempdir()) / "carag_bench_serve_index"),
        help="index folder (the demo index is built there if missing)",
    )
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=200)
    p.add_argument("--workers", type=int, default=4, help="--retrieval-workers of the server")
    p.add_argument(
        "--llm",
        default="stub",
        help="stub (default), or a name for resolve_llm: default, smollm2, qwen1.5b, a hub id/path",
    )
    p.add_argument(
        "--baseline",
        type=int,
        default=None,
        help="demo claims in the sequential pass (default all 21); the load cycles over them",
    )
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--no-stream", action="store_true", help="skip the streaming phase")
    p.add_argument(
        "--max-pending",
        type=int,
        default=None,
        help="the server's --max-pending (default max(256, concurrency)); below the concurrency, "
        "the excess must get 503 with Retry-After",
    )
    p.add_argument(
        "--server-threads",
        type=int,
        default=None,
        help="OMP_NUM_THREADS of the server (torch intra-op threads); default: torch's own choice",
    )
    args = p.parse_args()
    index = ensure_index(Path(args.index))
    from llama_index_carag.datasets import load_demo_corpus

    claims = [c.text for c in load_demo_corpus().claim_nodes][: args.baseline]
    proc, url = start_server(index, args)
    try:
        rows = asyncio.run(run(url, claims, args))
        rss = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    threads = args.server_threads or "default"
    print(
        f"carag serve load test — {machine()}; LLM {args.llm}; demo index; server torch threads {threads}; "
        f"server peak RSS {rss:.0f} MB"
    )
    print(
        table(
            rows,
            [
                "phase",
                "requests",
                "concurrency",
                "status",
                "wall s",
                "req/s",
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "max ms",
                "first event ms (median)",
                "/healthz p95 ms (polls)",
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
