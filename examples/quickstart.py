"""Quickstart: index a corpus, retrieve evidence for a claim with CARAG-u, show why.

    python examples/quickstart.py                       # the packaged demo corpus
    python examples/quickstart.py --data ../shared/data/factver/factver_master.csv --clusters 10

Runs offline with the packaged MiniLM encoder.
"""

from __future__ import annotations

import argparse
import os
import textwrap

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from llama_index_carag import CARAG_METADATA_KEY, ContextAwareRetriever, load_factver
from llama_index_carag.datasets import demo_corpus_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data", default=str(demo_corpus_path()), help="CSV in FactVer's layout (default: demo corpus)"
    )
    parser.add_argument("--mode", default="unsupervised", choices=["unsupervised", "supervised"])
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--delta", type=float, default=0.5)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--claims", type=int, default=3, help="how many of the corpus's claims to check")
    args = parser.parse_args()

    corpus = load_factver(args.data)
    print(corpus.summary())
    retriever = ContextAwareRetriever.from_defaults(
        corpus.evidence_nodes,
        claim_nodes=corpus.claim_nodes,
        embed_model="minilm",
        mode=args.mode,
        n_clusters=args.clusters,
        delta=args.delta,
        alpha=args.alpha,
        show_progress=True,
    )
    step = max(1, len(corpus.claim_nodes) // args.claims)
    for claim in corpus.claim_nodes[::step][: args.claims]:
        soi = retriever.build_soi(claim.text)
        print("\n" + "=" * 100)
        print(f"CLAIM  {claim.node_id}: {claim.text}")
        print(
            f"SOI    mode={soi.mode} cluster={soi.cluster} theme={soi.theme} size={len(soi)} "
            f"(of {soi.cluster_size} cluster items, delta={soi.delta})"
            + ("  -> empty: retrieval falls back to the claim vector" if soi.is_empty else "")
        )
        print(f"{'rank':>4} {'score':>6} {'sim(q)':>6} {'sim(T)':>6} {'clu':>3} {'in SOI':<28} evidence")
        for rank, hit in enumerate(retriever.retrieve(claim.text), start=1):
            info = hit.node.metadata[CARAG_METADATA_KEY]
            t_sim = "-" if info["thematic_similarity"] is None else f"{info['thematic_similarity']:.3f}"
            where = info["soi_kind"] or "-"
            text = textwrap.shorten(hit.node.get_content(), 70)
            print(
                f"{rank:>4} {hit.score:>6.3f} {info['claim_similarity']:>6.3f} {t_sim:>6} {info['cluster']!s:>3} {where:<28} {text}"
            )


if __name__ == "__main__":
    main()
