"""Query latency of this tree against an earlier revision: ``bench_query.py`` in both, alternated.

    python benchmarks/bench_revisions.py --base 63f3738 --rounds 2 -- --factver --queries 200
    python benchmarks/bench_revisions.py --base 63f3738 --rounds 2 -- --synthetic 100000

Each round runs the base revision's own ``benchmarks/bench_query.py`` (from a temporary
``git worktree``) and this tree's, one after the other (the order alternates by round).
Every run reports CARAG-u's median per-query time as a ratio to the plain vector retriever
timed interleaved in the same process; the plain retriever is the same code in both trees, so
the ratio of those ratios compares the two versions of CARAG-u on the same machine state.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_FACTVER = re.compile(r"CARAG-u / plain = ([0-9.]+)")
_SYNTH = re.compile(r"^\|\s*([0-9,]+)\s*\|.*\|\s*([0-9.]+)\s*\|\s*$", re.MULTILINE)


def ratios(output: str) -> dict[str, float]:
    """``{"factver": r}`` and ``{"<n>": r}`` for each synthetic size, from one bench_query output."""
    out: dict[str, float] = {}
    for m in _FACTVER.finditer(output):  # the last match wins
        out["factver"] = float(m.group(1))
    out.update({m.group(1).replace(",", ""): float(m.group(2)) for m in _SYNTH.finditer(output)})
    return out


def run(tree: Path, args: list[str]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    env.setdefault("CARAG_FACTVER", str(REPO.parent / "shared" / "data" / "factver" / "factver_master.csv"))
    done = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / "bench_query.py"), *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found = ratios(done.stdout)
    if not found:
        raise RuntimeError(f"no ratio in the output of {tree}:\n{done.stdout[-2000:]}")
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the revision to compare against")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("bench_args", nargs="+", help="arguments for bench_query.py (after --)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(base), args.base], check=True)
        try:
            results: dict[str, dict[str, list[float]]] = {"base": {}, "this": {}}
            for r in range(args.rounds):
                order = [("base", base), ("this", REPO)] if r % 2 == 0 else [("this", REPO), ("base", base)]
                for name, tree in order:
                    for key, value in run(tree, args.bench_args).items():
                        results[name].setdefault(key, []).append(value)
                    print(f"round {r + 1} {name}: {results[name]}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False)
    print(f"\nCARAG-u / plain, median over {args.rounds} runs each (bench_query.py {' '.join(args.bench_args)}):")
    print("| set | base " + args.base + " | this tree | this / base |\n|---|---:|---:|---:|")
    for key in results["base"]:
        b, t = statistics.median(results["base"][key]), statistics.median(results["this"].get(key, [float("nan")]))
        print(f"| {key} | {b:.3f} | {t:.3f} | {t / b:.3f} |")


if __name__ == "__main__":
    main()
