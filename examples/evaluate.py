"""Compare RAG, CARAG and CARAG-u on FactVer with one encoder, from Python.

    python examples/evaluate.py --data ../shared/data/factver/factver_master.csv [--embed-model mpnet]

The same as ``carag eval`` without the sweeps: one index, one encoder for the
corpus, the claims and the queries; the held-out report half of the claims.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from llama_index_carag import DEFAULT, load_factver, resolve_embed_model
from llama_index_carag.evaluation.runner import EvalSetup, RunSpec, paper_specs, run_specs, split_claims


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--embed-model", default="minilm")
    args = parser.parse_args()

    setup = EvalSetup.prepare(load_factver(args.data), resolve_embed_model(args.embed_model), cache_dir=".cache/eval")
    _, report = split_claims(setup.claims, seed=0)
    specs = [*paper_specs(), RunSpec("CARAG-u (default preset)", DEFAULT)]  # paper_specs has the tuned one
    print(f"{len(report)} held-out claims, encoder {setup.embed_name}")
    print(f"{'method':<24} {'theme P@6':>9} {'recall@6':>9} {'text R@6':>9} {'MRR':>6}")
    for spec, s in run_specs(setup, specs, report):
        print(f"{spec.name:<24} {s.theme_precision:9.4f} {s.recall:9.4f} {s.text_recall:9.4f} {s.mrr:6.3f}")


if __name__ == "__main__":
    main()
