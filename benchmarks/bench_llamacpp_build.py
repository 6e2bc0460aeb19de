"""Tokens per second of llama.cpp builds, side by side on this machine (one run, interleaved rounds).

Each build is a folder that holds an installed ``llama_cpp`` package (``pip install --no-deps --target DIR
WHEEL``); ``installed`` means the venv's own. Every measurement runs in a fresh subprocess, so a build that
crashes on this CPU is reported as crashed (with its signal) instead of ending the benchmark. Per round and
build: load the GGUF, evaluate a fixed prompt (prompt tokens/s), then generate greedily (generation tokens/s).

    python benchmarks/bench_llamacpp_build.py --build portable=installed --build native=/tmp/llamacpp-native \\
        --rounds 3 [--amx-permission]

``--amx-permission`` asks Linux for AMX tile state (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``)
in the child before llama.cpp loads, to test whether that is what a native AMX build lacks.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import ctypes, json, sys, time
if sys.argv[3] == "1":
    libc = ctypes.CDLL(None, use_errno=True)
    ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 0x1023, 18
    rc = libc.syscall(158, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)  # SYS_arch_prctl on x86-64
    print("arch_prctl", rc, ctypes.get_errno(), file=sys.stderr)
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=1024, n_threads=int(sys.argv[2]), n_threads_batch=int(sys.argv[2]),
            n_batch=512, verbose=False)
text = " ".join(["The evidence passage describes a study of vaccines, climate and public health claims."] * 24)
tokens = llm.tokenize(text.encode())[:384]
t0 = time.perf_counter(); llm.reset(); llm.eval(tokens); t1 = time.perf_counter()
llm.reset()
t2 = time.perf_counter()
out = llm.create_completion("Write a short paragraph about fact checking:", max_tokens=64, temperature=0.0)
t3 = time.perf_counter()
n_gen = out["usage"]["completion_tokens"]
print(json.dumps({"prompt_tps": len(tokens) / (t1 - t0), "gen_tps": n_gen / (t3 - t2), "n_gen": n_gen}))
"""


def _measure(build: str, model: str, threads: int, amx: bool) -> dict[str, object]:
    env = dict(os.environ)
    if build != "installed":
        env["PYTHONPATH"] = build + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, model, str(threads), "1" if amx else "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if proc.returncode < 0:
        return {"crashed": signal.Signals(-proc.returncode).name}
    if proc.returncode != 0:
        return {"failed": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", action="append", required=True, metavar="NAME=DIR|installed")
    p.add_argument("--model", default=None, help="GGUF (default: the offline Qwen, joined once)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--amx-permission", action="store_true")
    args = p.parse_args()
    if args.model is None:
        from llama_index_carag.models.files import qwen_gguf_path

        args.model = str(qwen_gguf_path())
    builds = dict(b.split("=", 1) for b in args.build)
    rows: dict[str, list[dict[str, object]]] = {name: [] for name in builds}
    for r in range(args.rounds):
        for name, folder in builds.items():
            result = _measure(folder, args.model, args.threads, args.amx_permission)
            rows[name].append(result)
            print(f"round {r + 1} {name}: {result}", flush=True)
    print(f"\nmodel {Path(args.model).name}, {args.threads} threads, {args.rounds} rounds (median)")
    print(f"{'build':<12} {'prompt tok/s':>13} {'gen tok/s':>10}")
    for name, results in rows.items():
        ok = [x for x in results if "prompt_tps" in x]
        if not ok:
            print(f"{name:<12} {results[0]}")
            continue
        prompt = statistics.median(float(x["prompt_tps"]) for x in ok)  # type: ignore[arg-type]
        gen = statistics.median(float(x["gen_tps"]) for x in ok)  # type: ignore[arg-type]
        print(f"{name:<12} {prompt:>13.1f} {gen:>10.1f}")


if __name__ == "__main__":
    main()
