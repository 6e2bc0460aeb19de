"""Seconds for the verifier's label on six passages (the issue's target: at most 1 s on 2 cores).

Claims and passages from ``benchmarks/verdict_evidence.py``'s JSON: FactVer's report claims with their six
retrieved passages (sentences to short paragraphs) and SciFact's with six retrieved abstracts (cut into
sentence chunks). The model is loaded and warmed first; each claim is timed alone (``ClaimVerifier.label``).

    python benchmarks/bench_verifier_speed.py --evidence evidence.json [--claims 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _common import machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--evidence", required=True)
    parser.add_argument("--claims", type=int, default=40)
    args = parser.parse_args()
    from llama_index_carag.verifier.model import shipped_verifier

    data = json.loads(Path(args.evidence).read_text(encoding="utf-8"))
    verifier = shipped_verifier()
    verifier.label("warm-up claim", ["a warm-up passage"])
    print(f"{machine()}; torch threads: {__import__('torch').get_num_threads()}")
    for name in ("factver", "scifact"):
        items = data[name]["report"][: args.claims]
        seconds = []
        for it in items:
            t0 = time.perf_counter()
            verifier.label(it["claim"], it["retrieved"][:6])
            seconds.append(time.perf_counter() - t0)
        print(
            f"{name}: {len(items)} claims, six retrieved passages each: median {statistics.median(seconds):.3f} s, "
            f"max {max(seconds):.3f} s per label"
        )


if __name__ == "__main__":
    main()
