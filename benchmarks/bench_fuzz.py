"""The fuzzing run of issue 46: ``tests/test_fuzz.py`` with thousands of generated inputs per property.

    python benchmarks/bench_fuzz.py [--examples 3000]

Each of the four properties (claim files, corpus CSVs, HTTP bodies, damaged persisted files — the last at a third
of the count: each example reloads an index) gets ``--examples`` inputs; prints the total, the failures and the
wall time.  The suite runs the same properties with ``FUZZ_EXAMPLES`` (default 60).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=3000, help="inputs per property (default 3000: 10,000 in all)")
    args = parser.parse_args()
    env = {**os.environ, "FUZZ_EXAMPLES": str(args.examples), "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_fuzz.py"], cwd=REPO, env=env
    )
    total = 3 * args.examples + max(10, args.examples // 3)
    print(f"fuzzing: {total} generated inputs, exit status {proc.returncode}, {time.perf_counter() - started:.0f} s")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
