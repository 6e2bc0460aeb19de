"""Summarise the verdict benchmark's rows on a smaller balanced subset of its report claims.

    python benchmarks/verdict_subset.py --per-label 4    # the 12 claims of earlier rounds

Rows come from ``docs/results/verdicts_rows.csv`` (``python -m research.eval --verdicts``); the subset is the first
``--per-label`` report-half claims of each label, exactly as the benchmark picks them, so LLMs run on
different numbers of claims can be compared on the claims they share.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))
from _common import FACTVER


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-label", type=int, default=4)
    p.add_argument(
        "--rows", default=str(Path(__file__).resolve().parents[1] / "docs" / "results" / "verdicts_rows.csv")
    )
    args = p.parse_args()
    from llama_index_carag.datasets import load_factver
    from research.runner import split_claims
    from research.verdict_bench import _COLUMNS, _done_rows, _summaries, balanced_subset

    corpus = load_factver(FACTVER)
    tune, report = split_claims(corpus.claim_nodes, 0)
    ids = [c.node_id for c in balanced_subset(report, args.per_label)]
    majority = max("TFN", key=[c.metadata.get("label") for c in tune].count)
    print("| " + " | ".join(_COLUMNS) + " |\n|" + "---|" * len(_COLUMNS))
    for row in _summaries(_done_rows(Path(args.rows)), majority, ids):
        print(
            "| "
            + " | ".join(
                f"{row.get(c):.3f}" if isinstance(row.get(c), float) else str(row.get(c, "-")) for c in _COLUMNS
            )
            + " |"
        )


if __name__ == "__main__":
    main()
