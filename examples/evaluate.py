"""Compare the stock retrievers and CARAG on new claims, from Python.

    python examples/evaluate.py --data ../shared/data/factver/factver_master.csv [--embed-model mpnet]

The same as ``carag eval --protocol``: one index, one encoder for passages, claims and queries; the query
claims (FactVer's report half) are never among the corpus claims CARAG may use. The papers' own comparison
(claims checked against an index that holds them) is research code: ``python -m research.eval``.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from llama_index_carag.evaluation.benchmark import run_protocol
from llama_index_carag.evaluation.new_claims import factver_task
from llama_index_carag.models.resolve import resolve_embed_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--embed-model", default="minilm")
    args = parser.parse_args()

    task = factver_task(args.data, queries="report")
    _, rows = run_protocol(task, resolve_embed_model(args.embed_model), cache_dir=".cache/eval", show_progress=True)
    print(f"{len(task.queries)} new claims, {len(task.evidence)} passages, encoder {args.embed_model}")
    print(f"{'method':<64} {'nDCG@10':>8} {'recall@6':>9} {'MRR@10':>7}")
    for r in rows:
        print(f"{r['method']:<64} {r['nDCG@10']:8.4f} {r['recall@6']:9.4f} {r['MRR@10']:7.4f}")


if __name__ == "__main__":
    main()
