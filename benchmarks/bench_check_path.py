"""The part of ``carag check`` outside the LLM: the old check path against the one claim-check layer.

    python benchmarks/bench_check_path.py                 # demo corpus, default settings, 24 claims x 3
    python benchmarks/bench_check_path.py --settings paper --repeats 5

The old path (before the ``ClaimChecker``, reproduced here from public calls): embed the claim, build its
SOI (``build_soi``), then ``retrieve`` (which computes the SOI again), then the result.  The new path:
``ClaimChecker.retrieve`` (one embedding, one SOI computation: ``retrieve_with_soi``) and the result.
Variants are timed interleaved (A B A B ...), so a busy machine slows both alike.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

from _common import interleaved, machine, median_ms, table
from llama_index.core.schema import QueryBundle

from llama_index_carag import ContextAwareRetriever, load_demo_corpus
from llama_index_carag.models.resolve import resolve_embed_model
from llama_index_carag.retrieval.indexing import build_faiss_index
from llama_index_carag.verdicts.check import ClaimChecker, Retrieved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", default="default", help="preset: default, paper or tuned")
    parser.add_argument("--claims", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    corpus = load_demo_corpus()
    model = resolve_embed_model("minilm")
    index = build_faiss_index(corpus.evidence_nodes, model)
    retriever = ContextAwareRetriever.from_index(index, args.settings, claim_nodes=corpus.claim_nodes)
    checker = ClaimChecker(retriever)
    claims = [c.get_content() for c in corpus.claim_nodes][: args.claims]

    def old(claim: str) -> object:
        bundle = QueryBundle(claim, embedding=model.get_agg_embedding_from_queries([claim]))
        soi = retriever.build_soi(bundle)
        nodes = retriever.retrieve(bundle)
        return checker.result(Retrieved(claim, bundle, soi, list(nodes), retriever.settings))

    def new(claim: str) -> object:
        return checker.result(checker.retrieve(claim))

    same = all(old(c).model_dump() == new(c).model_dump() for c in claims)  # type: ignore[attr-defined]
    times = interleaved({"old": old, "new": new}, claims, repeats=args.repeats)
    rows = [
        [
            "check without the LLM (embedding, SOI, retrieval, result)",
            "old: embed + build_soi + retrieve",
            f"{median_ms(times['old']):.2f}",
        ],
        ["", "new: ClaimChecker.retrieve", f"{median_ms(times['new']):.2f}"],
    ]
    print(f"{machine()}; demo corpus, {args.settings!r} settings, {len(claims)} claims x {args.repeats}")
    print(f"same results on both paths: {same}; ratio new/old {median_ms(times['new']) / median_ms(times['old']):.2f}")
    print(table(rows, ["what", "path", "median ms per claim"]))


if __name__ == "__main__":
    main()
