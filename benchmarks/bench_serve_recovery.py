"""Recovery of ``carag serve`` after ``kill -9`` of its LLM worker: kill → worker ready → first verdict.

    python benchmarks/bench_serve_recovery.py                  # the default LLM (Qwen, llama.cpp when installed)
    python benchmarks/bench_serve_recovery.py --llm smollm2

Starts the real ``carag serve`` (subprocess, 127.0.0.1, free port) on the demo index (built into
``--index`` if missing), runs ``--warm`` checks, reads the worker's pid from ``/v1/info``, sends it
SIGKILL, sends one check at once (it must get 503 ``llm_unavailable`` with ``Retry-After``), polls
``/v1/info`` every 50 ms until the worker is ``ready`` again, then times the next check.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

from _common import REPO, machine
from bench_serve import ensure_index

CLAIM = "Offshore wind farms drive fish away."


def call(url: str, path: str, body: dict | None = None, timeout: float = 900) -> tuple[int, Any, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


def worker(url: str) -> dict[str, Any]:
    return call(url, "/v1/info", timeout=10)[2]["llm_state"]["workers"][0]


def timed_check(url: str) -> tuple[float, Any]:
    start = time.monotonic()
    status, headers, body = call(url, "/v1/check", {"claim": CLAIM})
    return time.monotonic() - start, (status, headers, body)


def measure(url: str, warm: int) -> dict[str, Any]:
    out: dict[str, Any] = {"warm verdicts s": [round(timed_check(url)[0], 1) for _ in range(warm)]}
    pid = worker(url)["pid"]
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    seconds, (status, headers, body) = timed_check(url)
    out["right after the kill"] = f"{status} {body.get('error', {}).get('code')} Retry-After={headers['Retry-After']}"
    out["503 after s"] = round(seconds, 2)
    while worker(url)["state"] != "ready":
        time.sleep(0.05)
    ready = time.monotonic()
    seconds, (status, _, body) = timed_check(url)
    out.update(
        {
            "kill -> ready s": round(ready - killed, 1),
            "ready -> first verdict s": round(seconds, 1),
            "kill -> first verdict s": round(time.monotonic() - killed, 1),
            "first verdict": f"{status} {body['verdict']['label'] if status == 200 else body}",
            "restarts": worker(url)["restarts"],
        }
    )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llm", default="default", help="a carag --llm name (default: the offline default)")
    p.add_argument("--index", type=Path, default=Path(tempfile.gettempdir()) / "carag_bench_serve_index")
    p.add_argument("--warm", type=int, default=2, help="checks before the kill (default 2)")
    args = p.parse_args()
    index = ensure_index(args.index)
    cmd = [
        str(Path(sys.executable).parent / "carag"),
        "serve",
        "--index",
        str(index),
        "--port",
        "0",
        "--host",
        "127.0.0.1",
        "--timeout",
        "900",
        "--llm",
        args.llm,
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        url = next(line.split()[2].rstrip("/") for line in proc.stdout if line.startswith("carag serve: http://"))
        print(machine())
        for key, value in measure(url, args.warm).items():
            print(f"{key}: {value}")
        print(f"server still running: {proc.poll() is None}")
    finally:
        proc.terminate()
        proc.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
