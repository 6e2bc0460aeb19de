"""``carag check`` as a user runs it, whole processes: this tree against an earlier revision, alternated.

    python benchmarks/bench_check_latency.py --index IDX --base c85ab94 --runs 8 "A claim to check."
    python benchmarks/bench_check_latency.py --index IDX --base c85ab94 --runs 6 -- --no-explanation "A claim."

Each pair runs ``python -m llama_index_carag.cli check --index IDX ...`` with the base revision's package (a
temporary ``git worktree`` first on ``PYTHONPATH``, the working folder outside both trees) and with this tree's,
the order alternating by pair, after one warm-up run of each (model files and caches read once).  It prints each
side's wall seconds (start to exit, the interpreter's start-up and teardown included), their medians and the
median of the pairs' ratios (this tree / base): pairs keep the ratio meaningful on a machine whose speed drifts —
and whether the two trees printed the same output in every run.  Both sides use this virtual environment, so only
the package differs; the caches (unpacked models, llama.cpp's opening cache) are warm after the warm-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(tree: Path, command: list[str], workdir: str) -> tuple[float, str]:
    """Wall seconds and standard output of one ``carag`` run with ``tree``'s package."""
    env = dict(os.environ, PYTHONPATH=str(tree), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "llama_index_carag.cli", *command],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"carag failed in {tree} (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", required=True, help="an index folder (carag index ... --out IDX)")
    parser.add_argument("--base", required=True, help="the revision to compare against (a commit, tag or branch)")
    parser.add_argument("--runs", type=int, default=6, help="pairs timed after the warm-up (default 6)")
    parser.add_argument("check_args", nargs="+", help="carag check's arguments after --index (the claim, options)")
    args = parser.parse_args()

    command = ["check", "--index", str(Path(args.index).resolve()), *args.check_args]
    with tempfile.TemporaryDirectory(prefix="carag-bench-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(base), args.base], check=True)
        try:
            trees = {"this tree": REPO, f"base {args.base}": base}
            for tree in trees.values():
                timed(tree, command, tmp)
            times: dict[str, list[float]] = {name: [] for name in trees}
            outputs: set[str] = set()
            for pair in range(args.runs):
                for name in list(trees) if pair % 2 == 0 else list(trees)[::-1]:
                    seconds, output = timed(trees[name], command, tmp)
                    times[name].append(seconds)
                    outputs.add(output)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False)
    (new, old) = times.values()
    print(f"carag {' '.join(command)}; {os.cpu_count()} CPUs; {args.runs} pairs after one warm-up each")
    for name, values in times.items():
        print(f"{name:>20}: median {statistics.median(values):.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
    print(f"{'ratio':>20}: median {statistics.median(a / b for a, b in zip(new, old)):.3f} (this tree / base)")
    print(f"{'same output':>20}: {'yes, every run' if len(outputs) == 1 else f'no: {len(outputs)} different outputs'}")


if __name__ == "__main__":
    main()
