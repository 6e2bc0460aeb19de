"""Time and peak memory of fitting CARAG-u's clustering on n x 384 vectors.

    python benchmarks/bench_fit.py                 # 10k, 100k, 1M
    python benchmarks/bench_fit.py --sizes 10000   # one size

Each size runs in a fresh subprocess: the embedding matrix is created first
(its RSS is the baseline), then ``ThematicContext.fit`` builds the whole fitted
state (GMM-EM on a bounded random sample, batched ``predict`` for every row,
the cluster-sorted unit copy the SOI reads, member lists).  Peak memory is the
process's RSS, sampled every 2 ms during the fit, minus the RSS with the
matrix loaded (after a warm-up fit, so lazily imported modules do not count).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))


def child(n: int, dim: int) -> None:
    import threading
    import time

    import numpy as np
    from _synthetic import planted_vectors

    from llama_index_carag.core.context import CorpusItems, ThematicContext

    def rss_mb() -> float:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    peak = [0.0]
    running = [True]

    def sample() -> None:  # RSS sampled every 2 ms during the fit
        while running[0]:
            peak[0] = max(peak[0], rss_mb())
            time.sleep(0.002)

    # Warm-up on a tiny corpus so that lazily imported modules are not counted as fit memory.
    warm = planted_vectors(2000, dim, spread=0.6, seed=1)
    ThematicContext("unsupervised", n_clusters=10).fit(
        CorpusItems([f"w{i}" for i in range(2000)], warm, np.zeros(2000, dtype=bool), [None] * 2000)
    )
    del warm
    vectors = planted_vectors(n, dim, spread=0.6)
    ids = [f"n{i}" for i in range(n)]
    items = CorpusItems(ids=ids, vectors=vectors, is_claim=np.zeros(n, dtype=bool), claim_of=[None] * n)
    base = rss_mb()
    peak[0] = base
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    context = ThematicContext("unsupervised", n_clusters=10, random_state=0).fit(items)
    seconds = time.perf_counter() - t0
    running[0] = False
    sampler.join()
    matrix_mb = vectors.nbytes / 2**20
    extra = peak[0] - base
    print(
        json.dumps(
            {
                "n": n,
                "dim": dim,
                "seconds": round(seconds, 2),
                "matrix_mb": round(matrix_mb, 1),
                "peak_extra_mb": round(extra, 1),
                "ratio": round(extra / matrix_mb, 2),
                "total_ratio": round((extra + matrix_mb) / matrix_mb, 2),
                "clusters": len(context.groups),
                "fit_sample": min(n, 20_000),
            }
        )
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.dim)
        return
    from _common import machine

    print(f"CARAG-u clustering fit (t=10, diag GMM on a 20k random sample, batched predict), {machine()}")
    print("|          n | fit s | matrix MB | peak extra MB | extra / matrix | (matrix + extra) / matrix |")
    print("|-----------:|------:|----------:|--------------:|---------------:|--------------------------:|")
    for n in args.sizes:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(n), "--dim", str(args.dim)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {r['n']:>10,} | {r['seconds']:5.1f} | {r['matrix_mb']:9.1f} | {r['peak_extra_mb']:13.1f} | {r['ratio']:14.2f} | {r['total_ratio']:25.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
