"""Batch checking against one check at a time, and ``--no-explanation`` against full verdicts.

    python benchmarks/bench_batch.py --llm smollm2 --claims 10      # demo corpus, demo claims

One run, the LLM loaded once for the in-process rows:

* **single**: each claim through one ``ClaimChecker.check`` and its JSON (what ``carag check --json`` does, the
  model loaded once);
* **batch**: the same claims through the loop of ``carag check --claims FILE --out results.jsonl``
  (``check_claims``, one record appended + flushed + fsync-ed per claim, the progress bar), same checker;
* **batch --no-explanation**: that loop with the triage checker (``VerdictSettings.explain=False``: the labels
  scored, no explanation generated);
* **CLI wall** (``--cli``): the whole ``carag check --claims`` command once, in this process (index and LLM
  loaded again, once), so its per-claim time includes one load spread over the claims.

Targets (issue 29): batch per claim <= 1.1 x single; --no-explanation throughput >= 2 x full verdicts.
The three in-process variants run round-robin per repeat (single, batch, triage, ...), so a busy machine
slows them alike.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

from _common import machine, table

from llama_index_carag.cli import main as carag
from llama_index_carag.cli.check import ResultsFile, _check_batch, _index_checker
from llama_index_carag.datasets import demo_corpus_path, load_demo_corpus
from llama_index_carag.models.resolve import resolve_llm
from llama_index_carag.retrieval.retriever import ContextAwareRetriever
from llama_index_carag.verdicts.bulk import BatchClaim


def _quiet(argv: list[str]) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return carag(argv)


def _batch_seconds(checker: object, claims: list[str], out: Path) -> float:
    out.unlink(missing_ok=True)
    items = [BatchClaim(n, c) for n, c in enumerate(claims, start=1)]
    start = time.perf_counter()
    with ResultsFile(out) as results, contextlib.redirect_stderr(io.StringIO()):
        _check_batch(checker, items, results)
    return time.perf_counter() - start


def _single_seconds(checker: object, claims: list[str]) -> float:
    start = time.perf_counter()
    for claim in claims:  # what ``carag check --json`` does with one claim, the model already loaded
        json.dumps(checker.check(claim).to_json_dict(), ensure_ascii=False)  # type: ignore[attr-defined]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--llm",
        default="smollm2",
        help="the --llm of carag check (default: smollm2; none: retrieval only, "
        "which isolates the batch loop's own cost: the record, its fsync, the bar)",
    )
    parser.add_argument("--claims", type=int, default=10, help="how many demo claims")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cli", action="store_true", help="also time the whole command once (loads the LLM again)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench_batch_"))
    index = work / "index"
    assert _quiet(["index", str(demo_corpus_path()), "--out", str(index), "--clusters", "3", "--delta", "0.5"]) == 0
    claims = [c.get_content() for c in load_demo_corpus().claim_nodes][: args.claims]
    (work / "claims.txt").write_text("\n".join(claims) + "\n", encoding="utf-8")

    retriever = ContextAwareRetriever.from_persist_dir(index)
    load = time.perf_counter()
    llm = None if args.llm == "none" else resolve_llm(args.llm)
    load = time.perf_counter() - load
    full, triage = _index_checker(str(index), retriever, llm), _index_checker(str(index), retriever, llm, False)
    full.check(claims[0])  # warm-up: first-call costs (the verifier's weights, caches) out of the timings
    times: dict[str, list[float]] = {"single": [], "batch": [], "triage": []}
    for _ in range(args.repeats):
        times["single"].append(_single_seconds(full, claims))
        times["batch"].append(_batch_seconds(full, claims, work / "batch.jsonl"))
        times["triage"].append(_batch_seconds(triage, claims, work / "triage.jsonl"))
        print({k: f"{v[-1]:.1f} s" for k, v in times.items()}, flush=True)  # each repeat, as it ends
    cli = float("nan")
    if args.cli:
        cli = time.perf_counter()
        argv = ["check", "--claims", str(work / "claims.txt"), "--out", str(work / "cli.jsonl"), "--index", str(index)]
        assert _quiet([*argv, *(["--no-llm"] if llm is None else ["--llm", args.llm])]) == 0
        cli = time.perf_counter() - cli

    per = {k: statistics.median(v) / len(claims) for k, v in times.items()}
    rows = [
        ["single: ClaimChecker.check + JSON each", f"{per['single']:.2f}", "1.00"],
        ["batch: carag check --claims loop", f"{per['batch']:.2f}", f"{per['batch'] / per['single']:.2f}"],
        ["batch --no-explanation", f"{per['triage']:.2f}", f"{per['triage'] / per['single']:.2f}"],
        ["CLI wall, index + LLM loaded once", f"{cli / len(claims):.2f}", f"{cli / len(claims) / per['single']:.2f}"],
    ]
    print(f"{machine()}; --llm {args.llm} (load {load:.1f} s); demo corpus, {len(claims)} claims x {args.repeats}")
    print(table(rows, ["path", "s per claim", "x single"]))
    print(
        f"batch / single: {per['batch'] / per['single']:.2f} (target <= 1.1); "
        f"--no-explanation throughput / full: {per['batch'] / per['triage']:.2f} (target >= 2)"
    )


if __name__ == "__main__":
    main()
