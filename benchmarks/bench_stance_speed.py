"""Seconds per verdict (six passages, llama.cpp Qwen), through the public synthesizer, per decision.

    python benchmarks/bench_stance_speed.py --claims 3 --threads 2 --decision argmax
    python benchmarks/bench_stance_speed.py --claims 3 --threads 2 --decision stance

Prints wall seconds and CPU seconds of this process (llama.cpp's threads included) per verdict: on a
loaded machine the wall time measures the load, while CPU seconds / threads is what the verdict costs
on idle cores (an estimate: it ignores memory-bandwidth contention).

FactVer report-half claims with their annotated evidence (up to six passages), as the verdict benchmark picks
them; the first verdict also computes the content-free prior (cached afterwards) and is reported apart.  The
target (issue 20) is <= 15 s per verdict on 2 cores; say whether the machine was quiet when you quote it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))
from _common import FACTVER, machine


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--claims", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--decision", default="stance")
    args = p.parse_args()
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_carag.models.files import qwen_gguf_path
    from llama_index_carag.models.llamacpp import load_llamacpp
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer
    from research.verdict_cache import domain_claims

    claims = domain_claims("factver", FACTVER, 1, cache_dir="/tmp/vbench/emb")
    llm = load_llamacpp(str(qwen_gguf_path()), context_window=4096, max_new_tokens=128, n_threads=args.threads)
    synth = FactCheckSynthesizer(llm, decision=args.decision)
    t0 = time.perf_counter()
    synth._scored_verdicts.prior()
    print(f"content-free prior: {time.perf_counter() - t0:.1f} s (once per model)")
    for claim in claims[: args.claims]:
        texts, ids, _ = claim.evidence["annotated"]
        nodes = [NodeWithScore(node=TextNode(text=t, id_=i), score=None) for t, i in zip(texts, ids)]
        t0, c0 = time.perf_counter(), time.process_time()
        v = synth.synthesize(claim.claim, nodes).metadata["verdict"]
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        threads = args.threads or os.cpu_count() or 1
        print(
            f"{len(nodes)} passages: {wall:.1f} s wall, {cpu:.1f} CPU-s (~{cpu / threads:.1f} s on {threads} idle cores)"
            f"  {v.label.value}  {v.explanation[:80]!r}"
        )
    print(machine(), "load average", os.getloadavg())


if __name__ == "__main__":
    main()
