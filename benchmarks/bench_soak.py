"""Soak of ``carag serve``: minutes of mixed load, watching the server's memory and file descriptors.

    python benchmarks/bench_soak.py                              # 3 minutes, 4 clients at once
    python benchmarks/bench_soak.py --minutes 2 --json-out soak.json
    python benchmarks/bench_soak.py --minutes 30 --concurrency 8 --warmup-s 120

The server is the real ``carag serve`` in a subprocess on 127.0.0.1 (a free port), on the demo index (built
once into ``--index`` if missing, as ``bench_serve.py`` does), with the stub LLM of ``bench_serve.py``
(``--llm-factory benchmarks.bench_serve:make_stub_llm``) in its supervised LLM worker process.  ``--concurrency``
clients send, one request after another, the routes in turn: ``POST /v1/check``, ``/v1/check/stream``,
``/v1/check-text`` (two demo claims as one text), ``/v1/check-batch`` (three demo claims) and
``/v1/graph``, until ``--minutes`` have passed (the requests in flight then finish).

Every ``--sample-s`` seconds the RSS (``VmRSS`` of ``/proc/PID/status``) and open file descriptors
(``/proc/PID/fd``) of the server and of each of its child processes (the LLM worker, multiprocessing's
resource tracker) are read.  The load pauses twice — after the first ``--warmup-s`` seconds (default
30 s, or a quarter of a shorter run) and at the end — with the clients' connections closed, and the
process tree is read while it is idle: those two readings are "after warm-up" and "end".

A request fails unless it answers 200 with what the route promises: a check result with a verdict, a
stream ending with ``done`` (or a ``summary`` with no ``claim_error``), a graph with its
figure; every check result of a claim must equal the first one seen for it (by any route).

Printed: per route the requests, status codes, failures and latency p50/p99/max (the whole run); per
process RSS after warm-up, max and at the end, the growth in %, and fds after warm-up, max and at the end.
Exit status 1 if a request failed, the process tree's RSS at the end is more than ``--max-growth`` (10 %)
over its value after warm-up, it has more open fds than after warm-up, a process of the tree was replaced
(a worker restart) or the server logged a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

from _common import REPO, machine, table
from bench_serve import ensure_index

ROUTES = ("/v1/check", "/v1/check/stream", "/v1/check-text", "/v1/check-batch", "/v1/graph")
SETTLE_S = 2.0  # idle time before the "after warm-up" and "end" readings: closed connections are gone


@dataclass
class Outcome:
    """One request: its route, HTTP status (0: transport error), seconds, and why it failed (``None``: it did not)."""

    route: str
    status: int
    seconds: float
    error: str | None = None
    ended: float = 0.0  # monotonic time it ended


@dataclass
class ProcReading:
    """One process of the server's tree at one moment."""

    pid: int
    role: str
    rss_mb: float
    fds: int


@dataclass
class Reading:
    """The process tree at ``t`` seconds from the start of the load."""

    t: float
    procs: dict[int, ProcReading]
    label: str = ""  # "warm-up" or "end" for the idle readings

    @property
    def rss_mb(self) -> float:
        return sum(p.rss_mb for p in self.procs.values())

    @property
    def fds(self) -> int:
        return sum(p.fds for p in self.procs.values())


@dataclass
class Soak:
    """What the run collected."""

    outcomes: list[Outcome] = field(default_factory=list)
    readings: list[Reading] = field(default_factory=list)
    reference: dict[str, dict[str, Any]] = field(default_factory=dict)  # claim -> its first check result
    started: float = field(default_factory=time.monotonic)


# --- the server's process tree --------------------------------------------------------------------------------


def _children_map() -> dict[int, list[int]]:
    """``ppid -> [pid, ...]`` for every process in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # ended meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name in (...) may hold spaces
        children.setdefault(ppid, []).append(int(entry))
    return children


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    children, tree, todo = _children_map(), [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def _role(pid: int, root: int) -> str:
    if pid == root:
        return "server"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"
    if "resource_tracker" in cmd:
        return "resource tracker"
    return "LLM worker" if "spawn_main" in cmd else cmd[:40]


def read_process(pid: int, root: int) -> ProcReading | None:
    """RSS and open fds of one process; ``None`` if it ended meanwhile."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss_kb = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return ProcReading(pid, _role(pid, root), rss_kb / 1024, fds)


def read_tree(root: int, t: float, label: str = "") -> Reading:
    procs = {r.pid: r for r in (read_process(p, root) for p in process_tree(root)) if r is not None}
    return Reading(round(t, 1), procs, label)


async def sample_every(root: int, soak: Soak, every_s: float, stop: asyncio.Event) -> None:
    """Read the tree every ``every_s`` seconds until ``stop``."""
    while not stop.is_set():
        soak.readings.append(read_tree(root, time.monotonic() - soak.started))
        try:
            await asyncio.wait_for(stop.wait(), every_s)
        except asyncio.TimeoutError:
            pass


# --- the server -------------------------------------------------------------------------------------------------


def start_server(index: Path, args: argparse.Namespace, log: IO[str]) -> tuple[subprocess.Popen, str]:
    """``carag serve`` on 127.0.0.1, a free port, the stub LLM in a worker process; stderr into ``log``."""
    cmd = [
        str(Path(sys.executable).parent / "carag"),
        "serve",
        "--index",
        str(index),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--timeout",
        str(args.timeout),
        "--max-client-requests",
        str(args.max_client_requests),  # every client here is 127.0.0.1: one address
        "--llm-factory",
        "benchmarks.bench_serve:make_stub_llm",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("carag serve: http://"):
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # drain: a full pipe would block it
            return proc, line.split()[2].rstrip("/")
    raise RuntimeError(f"carag serve did not start (exit {proc.wait()}); see {log.name}")


async def wait_ready(client: Any) -> None:
    """Until ``/v1/info`` says the LLM worker is ready (the server listens before the worker has loaded)."""
    for _ in range(600):
        state = (await client.get("/v1/info")).json().get("llm_state") or {}
        if all(w.get("state") == "ready" for w in state.get("workers", [])):
            return
        await asyncio.sleep(0.5)
    raise RuntimeError("the LLM worker did not become ready in 300 s")


# --- the requests -----------------------------------------------------------------------------------------------


async def sse_events(client: Any, path: str, body: dict[str, Any]) -> tuple[int, list[tuple[str, Any]]]:
    """POST ``body`` to a streamed route; its status and ``(event, data)`` pairs."""
    events: list[tuple[str, Any]] = []
    async with client.stream("POST", path, json=body) as r:
        if r.status_code != 200:
            await r.aread()
            return r.status_code, [("http_error", r.text[:200])]
        event = ""
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                events.append((event, json.loads(line[6:])))
    return 200, events


def same_as_first(soak: Soak, result: dict[str, Any]) -> str | None:
    """``None`` if ``result`` equals the first check result seen for its claim (which it becomes if first)."""
    result = {k: v for k, v in result.items() if k != "index"}
    if result.get("verdict") is None:
        return f"no verdict for {result.get('claim')!r}"
    first = soak.reference.setdefault(result["claim"], result)
    if first == result:
        return None
    return f"{', '.join(differing(first, result))} differ from the first result for {result['claim']!r}"


def differing(a: Any, b: Any, path: str = "") -> list[str]:
    """The paths (``verdict.raw``, ``evidence[0]``) where ``a`` and ``b`` differ, at most three levels down."""
    if a == b:
        return []
    if isinstance(a, dict) and isinstance(b, dict) and path.count(".") < 2:
        keys = sorted(set(a) | set(b))
        return [d for k in keys for d in differing(a.get(k), b.get(k), f"{path}.{k}" if path else k)]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and path.count(".") < 2:
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differing(x, y, f"{path}[{i}]")]
    return [path or "result"]


def _first_error(checks: list[str | None]) -> str | None:
    return next((c for c in checks if c), None)


async def do_check(client: Any, soak: Soak, claims: list[str]) -> tuple[int, str | None]:
    r = await client.post("/v1/check", json={"claim": claims[0]})
    if r.status_code != 200:
        return r.status_code, r.text[:200]
    return 200, same_as_first(soak, r.json())


async def do_stream(client: Any, soak: Soak, claims: list[str]) -> tuple[int, str | None]:
    status, events = await sse_events(client, "/v1/check/stream", {"claim": claims[0]})
    if not events or events[-1][0] != "done":
        return status, f"stream ended with {events[-1] if events else 'nothing'}"[:200]
    return status, same_as_first(soak, events[-1][1])


async def do_text(client: Any, soak: Soak, claims: list[str]) -> tuple[int, str | None]:
    status, events = await sse_events(client, "/v1/check-text", {"text": " ".join(claims[:2])})
    bad = [e for e in events if e[0] not in ("claims", "claim", "summary")]
    if bad or not events or events[-1][0] != "summary":
        return status, f"text events: {bad[:1] or events[-1:]}"[:200]
    return status, _first_error([same_as_first(soak, data["check"]) for name, data in events if name == "claim"])


async def do_batch(client: Any, soak: Soak, claims: list[str]) -> tuple[int, str | None]:
    status, events = await sse_events(client, "/v1/check-batch", {"claims": claims})
    results = [data for name, data in events if name == "result"]
    if len(results) != len(claims) or not events or events[-1][0] != "summary":
        return status, f"batch events: {[e for e in events if e[0] != 'result'][:2]}"[:200]
    return status, _first_error([same_as_first(soak, data) for data in results])


async def do_graph(client: Any, soak: Soak, claims: list[str]) -> tuple[int, str | None]:
    r = await client.post("/v1/graph", json={"claim": claims[0]})
    if r.status_code != 200:
        return r.status_code, r.text[:200]
    body = r.json()
    return 200, None if body.get("figure", {}).get("data") is not None and "soi" in body else "graph without figure"


Request = Callable[[Any, Soak, list[str]], Awaitable[tuple[int, str | None]]]
REQUESTS: dict[str, Request] = dict(zip(ROUTES, (do_check, do_stream, do_text, do_batch, do_graph)))


async def one_request(client: Any, soak: Soak, route: str, claims: list[str]) -> Outcome:
    """One request of ``route``; a transport error or timeout is a failure with status 0."""
    import httpx

    t0 = time.monotonic()
    try:
        status, error = await REQUESTS[route](client, soak, claims)
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        status, error = 0, repr(exc)[:200]
    if status != 200 and error is None:
        error = f"status {status}"
    return Outcome(route, status, time.monotonic() - t0, error, time.monotonic() - soak.started)


# --- the load ---------------------------------------------------------------------------------------------------


async def client_loop(client: Any, soak: Soak, claims: list[str], first: int, step: int, until: float) -> int:
    """One client: the routes in turn, from request number ``first`` by ``step``, until ``until``; next number."""
    n = first
    while time.monotonic() < until:
        route = ROUTES[n % len(ROUTES)]
        picked = [claims[(n + i) % len(claims)] for i in range(3)]
        soak.outcomes.append(await one_request(client, soak, route, picked))
        n += step
    return n


async def load_phase(url: str, soak: Soak, claims: list[str], args: argparse.Namespace, seconds: float) -> None:
    """``--concurrency`` clients for ``seconds``, on one connection pool closed at the end."""
    import httpx

    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    start = len(soak.outcomes)  # a phase goes on with the request numbers, so every route keeps its turn
    async with httpx.AsyncClient(base_url=url, timeout=args.timeout + 30, limits=limits) as client:
        until = time.monotonic() + seconds
        await asyncio.gather(
            *(client_loop(client, soak, claims, start + i, args.concurrency, until) for i in range(args.concurrency))
        )


async def idle_reading(root: int, soak: Soak, label: str) -> Reading:
    await asyncio.sleep(SETTLE_S)
    reading = read_tree(root, time.monotonic() - soak.started, label)
    soak.readings.append(reading)
    return reading


async def soak_run(url: str, root: int, claims: list[str], args: argparse.Namespace, warmup_s: float) -> Soak:
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(client)
    soak = Soak()
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_every(root, soak, args.sample_s, stop))
    await load_phase(url, soak, claims, args, warmup_s)
    await idle_reading(root, soak, "warm-up")
    await load_phase(url, soak, claims, args, args.minutes * 60 - warmup_s)
    await idle_reading(root, soak, "end")
    stop.set()
    await sampler
    return soak


# --- the report -------------------------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] * 1000


def route_rows(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    rows = []
    for route in ROUTES:
        mine = [o for o in outcomes if o.route == route]
        ok = [o.seconds for o in mine if o.error is None]
        rows.append(
            {
                "route": route,
                "requests": len(mine),
                "status": dict(sorted(Counter(o.status for o in mine).items())),
                "failures": sum(o.error is not None for o in mine),
                "p50_ms": _pct(ok, 0.5) if ok else None,
                "p99_ms": _pct(ok, 0.99) if ok else None,
                "max_ms": max(ok) * 1000 if ok else None,
            }
        )
    return rows


def _labelled(readings: list[Reading], label: str) -> Reading:
    return next(r for r in readings if r.label == label)


def process_rows(readings: list[Reading]) -> list[dict[str, Any]]:
    """Per process of the tree after warm-up, then the whole tree: RSS and fds after warm-up, max, end."""
    warm, end = _labelled(readings, "warm-up"), _labelled(readings, "end")
    roles = {pid: proc.role for r in readings for pid, proc in r.procs.items()}
    rows = []
    for pid in sorted(roles, key=lambda p: (roles[p] != "server", p)):
        mine = [r.procs[pid] for r in readings if pid in r.procs]
        rows.append(_row(f"{mine[0].role} ({pid})", warm.procs.get(pid), mine, end.procs.get(pid)))
    total = [ProcReading(0, "all", r.rss_mb, r.fds) for r in readings]
    rows.append(_row("all processes", total[readings.index(warm)], total, total[readings.index(end)]))
    return rows


def _row(name: str, warm: ProcReading | None, seen: list[ProcReading], end: ProcReading | None) -> dict[str, Any]:
    growth = None if warm is None or end is None or not warm.rss_mb else (end.rss_mb / warm.rss_mb - 1) * 100
    return {
        "process": name,
        "rss_warm_mb": None if warm is None else warm.rss_mb,
        "rss_max_mb": max(p.rss_mb for p in seen),
        "rss_end_mb": None if end is None else end.rss_mb,
        "rss_growth_pct": growth,
        "fds_warm": None if warm is None else warm.fds,
        "fds_max": max(p.fds for p in seen),
        "fds_end": None if end is None else end.fds,
    }


def failure_reasons(soak: Soak, args: argparse.Namespace, log_path: Path) -> list[str]:
    """Why the soak fails (empty: it passes)."""
    reasons = []
    failed = [o for o in soak.outcomes if o.error is not None]
    if failed:
        reasons.append(f"{len(failed)} of {len(soak.outcomes)} requests failed, first: {failed[0].error}")
    warm, end = _labelled(soak.readings, "warm-up"), _labelled(soak.readings, "end")
    if end.rss_mb > warm.rss_mb * (1 + args.max_growth / 100):
        reasons.append(f"RSS grew {warm.rss_mb:.0f} -> {end.rss_mb:.0f} MB (over +{args.max_growth:g} %)")
    if end.fds > warm.fds:
        reasons.append(f"open fds grew {warm.fds} -> {end.fds}")
    if set(end.procs) != set(warm.procs):
        reasons.append(f"the process tree changed: {sorted(warm.procs)} -> {sorted(end.procs)}")
    tracebacks = log_path.read_text(errors="replace").count("Traceback")
    if tracebacks:
        reasons.append(f"the server logged {tracebacks} traceback(s): {log_path}")
    return reasons


def per_minute(outcomes: list[Outcome]) -> list[float]:
    """Requests per second answered in each minute of the run (the last, partial minute over its own length)."""
    if not outcomes:
        return []
    end = max(o.ended for o in outcomes)
    minutes = Counter(int(o.ended // 60) for o in outcomes)
    return [round(minutes[m] / max(1.0, min(60.0, end - m * 60)), 2) for m in range(int(end // 60) + 1)]


def _fmt(x: Any, spec: str = ".0f") -> str:
    return "-" if x is None else format(x, spec)


ROUTE_HEADER = ["route", "requests", "status", "failures", "p50 ms", "p99 ms", "max ms"]
PROCESS_HEADER = ["process", "RSS after warm-up MB", "RSS max MB", "RSS end MB", "growth %"]
PROCESS_HEADER += ["fds after warm-up", "fds max", "fds end"]


def print_report(routes: list[dict[str, Any]], procs: list[dict[str, Any]], head: str, reasons: list[str]) -> None:
    print(head)
    status = lambda codes: " ".join(f"{c}×{n}" for c, n in codes.items())  # noqa: E731
    print(
        table(
            [
                [r["route"], str(r["requests"]), status(r["status"]), str(r["failures"])]
                + [_fmt(r[k]) for k in ("p50_ms", "p99_ms", "max_ms")]
                for r in routes
            ],
            ROUTE_HEADER,
        )
    )
    print()
    keys = ("rss_warm_mb", "rss_max_mb", "rss_end_mb")
    print(
        table(
            [
                [p["process"], *(_fmt(p[k]) for k in keys), _fmt(p["rss_growth_pct"], "+.1f")]
                + [_fmt(p[k], "d") for k in ("fds_warm", "fds_max", "fds_end")]
                for p in procs
            ],
            PROCESS_HEADER,
        )
    )
    print("\nPASS" if not reasons else "\nFAIL: " + "; ".join(reasons))


# --- main -------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument(
        "--index",
        default=str(Path(tempfile.gettempdir()) / "carag_bench_serve_index"),
        help="index folder (the demo index is built there if missing; shared with bench_serve.py)",
    )
    p.add_argument("--minutes", type=float, default=3.0, help="length of the load, warm-up included (default 3)")
    p.add_argument("--concurrency", type=int, default=4, help="clients sending at once (default 4)")
    p.add_argument("--warmup-s", type=float, default=None, help="warm-up seconds (default 30, at most 1/4 of the run)")
    p.add_argument("--sample-s", type=float, default=5.0, help="seconds between readings of RSS and fds (default 5)")
    p.add_argument("--max-growth", type=float, default=10.0, help="RSS growth after warm-up allowed, in %% (10)")
    p.add_argument("--timeout", type=float, default=120.0, help="the server's --timeout (default 120 s)")
    p.add_argument(
        "--max-client-requests",
        type=int,
        default=None,
        help="the server's --max-client-requests (default --concurrency: every client here is one address, "
        "so the limit is met exactly and a 429 is a failure)",
    )
    p.add_argument("--json-out", type=Path, default=None, help="write the figures to this JSON file")
    args = p.parse_args(argv)
    args.max_client_requests = args.max_client_requests or args.concurrency
    if args.warmup_s is None:
        args.warmup_s = min(30.0, args.minutes * 60 / 4)
    if not 0 < args.warmup_s < args.minutes * 60 or args.concurrency < 1:
        p.error("need 0 < --warmup-s < the run, and --concurrency >= 1")
    return args


def write_json(path: Path, head: str, args: argparse.Namespace, soak: Soak, report: dict[str, Any]) -> None:
    failures = [asdict(o) for o in soak.outcomes if o.error is not None][:50]
    timeline = [{"t": r.t, "label": r.label, "rss_mb": r.rss_mb, "fds": r.fds} for r in soak.readings]
    options = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    body = {"run": head, "args": options, **report, "failures": failures, "readings": timeline}
    path.write_text(json.dumps(body, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    index = ensure_index(Path(args.index))
    from llama_index_carag.datasets import load_demo_corpus

    claims = [c.text for c in load_demo_corpus().claim_nodes]
    load_before = os.getloadavg()
    with tempfile.NamedTemporaryFile("w", prefix="carag_soak_", suffix=".log", delete=False) as log:
        proc, url = start_server(index, args, log)
        try:
            soak = asyncio.run(soak_run(url, proc.pid, claims, args, args.warmup_s))
        finally:
            proc.terminate()
            proc.wait(30)
    load = f"{load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}"
    head = (
        f"carag serve soak — {machine()}; load avg {load}; {args.minutes:g} min, {args.concurrency} clients, "
        f"warm-up {args.warmup_s:g} s; stub LLM, demo index; {len(soak.outcomes)} requests, "
        f"req/s by minute {per_minute(soak.outcomes)}; server log {log.name}"
    )
    routes, procs = route_rows(soak.outcomes), process_rows(soak.readings)
    reasons = failure_reasons(soak, args, Path(log.name))
    print_report(routes, procs, head, reasons)
    if args.json_out:
        write_json(args.json_out, head, args, soak, {"routes": routes, "processes": procs, "reasons": reasons})
    return 1 if reasons else 0


if __name__ == "__main__":
    sys.exit(main())
