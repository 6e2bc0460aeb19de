"""Cost of the stage calibration (issue 22) against the fit it follows, and the query latency after it.

    python benchmarks/bench_calibration.py --cache-dir .cache/eval   # FactVer report half, MiniLM
    python benchmarks/bench_calibration.py --beir ../shared/data/scifact --cache-dir .cache/eval

Targets: calibration <= 2x the fit time on FactVer (the fit: ``from_index`` with the default preset on
the pre-embedded corpus claims — clustering, BM25, contrast table; embedding the claims is left out,
which makes the ratio stricter); per-query latency of the calibrated retriever = the default's (the
weights are fitted once).  Fit and calibration are timed alternately, ``--repeats`` times each; the
queries of both retrievers interleaved (A B B A ...) so a busy machine slows both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

from _common import FACTVER, interleaved, machine, median_ms, table

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.models.resolve import resolve_embed_model
from llama_index_carag.retrieval.calibration import calibrate_corpus
from llama_index_carag.settings import DEFAULT
from research.new_claims import beir_task, factver_task, prepare_task
from research.retrieval_bench import cached_evidence_vectors


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--beir", default=None, help="a BEIR folder (default: FactVer's report half)")
    p.add_argument("--cache-dir", default=None, help="passage-embedding cache (research.retrieval_bench's)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    task = beir_task(args.beir) if args.beir else factver_task(FACTVER)
    model = resolve_embed_model("minilm")
    vectors = cached_evidence_vectors(task, model, args.cache_dir)
    prepared = prepare_task(task, model, evidence_vectors=vectors)
    fit_s, cal_s = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        default = ContextAwareRetriever.from_index(prepared.index, DEFAULT, claim_nodes=prepared.corpus_claims)
        fit_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        calibration = calibrate_corpus(prepared.index, default.corpus, DEFAULT, claim_nodes=prepared.corpus_claims)
        cal_s.append(time.perf_counter() - t0)
    calibrated = ContextAwareRetriever(prepared.index, default.corpus, calibration.settings)
    fit, cal = statistics.median(fit_s), statistics.median(cal_s)
    print(f"{task.name}: {len(task.evidence)} passages, {calibration.n_claims} linked corpus claims ({machine()})")
    print(
        f"calibration: {calibration.reason}; weights {calibration.weights}; leave-one-out nDCG@10 "
        f"{calibration.base_ndcg:.4f} -> {calibration.ndcg:.4f} (gain {calibration.gain:+.4f} ± {calibration.se:.4f}, "
        f"out of fold {calibration.cv_gain:+.4f})"
    )
    print(
        table(
            [["fit (default)", f"{fit:.2f}", "1.00x"], ["calibration", f"{cal:.2f}", f"{cal / fit:.2f}x"]],
            ["step", "median s", "vs fit"],
        )
    )
    queries = [q.get_content() for q in task.queries]
    times = interleaved({"default": default.retrieve, "calibrated": calibrated.retrieve}, queries)
    base = median_ms(times["default"])
    rows = [[name, f"{median_ms(t):.2f}", f"{median_ms(t) / base:.3f}x"] for name, t in times.items()]
    print(f"\nper query, retrieval only (query embedding cached), {len(queries)} queries")
    print(table(rows, ["retriever", "median ms", "ratio"]))


if __name__ == "__main__":
    main()
