"""How the GMM covariance choice behaves on FactVer embeddings (time, theme NMI, stability).

    python benchmarks/bench_clustering.py [--model minilm|mpnet] [--clusters 10]

Fits ThematicClusterer on all FactVer claims + evidence with several covariance
settings and 3 seeds; prints fit time, NMI against the three themes, and the
adjusted Rand index between seeds (stability).  Supports the default
(covariance_type="diag") documented in ThematicClusterer.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

import numpy as np
from _common import machine, table
from _factver_embeddings import factver_embeddings
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from llama_index_carag.core.clustering import ThematicClusterer
from llama_index_carag.core.vectors import l2_normalize

SETTINGS = [
    ("diag (raw)", {"covariance_type": "diag"}),
    ("spherical (raw)", {"covariance_type": "spherical"}),
    ("full (raw)", {"covariance_type": "full"}),
    ("full, PCA-16", {"covariance_type": "full", "reduce_dim": 16}),
    ("full, PCA-32", {"covariance_type": "full", "reduce_dim": 32}),
    ("full, PCA-64", {"covariance_type": "full", "reduce_dim": 64}),
    ("diag, PCA-32", {"covariance_type": "diag", "reduce_dim": 32}),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="minilm")
    p.add_argument("--clusters", type=int, default=10)
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    corpus, E, C, _ = factver_embeddings(args.model)
    X = l2_normalize(np.vstack([E, C]))
    themes = [n.metadata["theme"] for n in corpus.evidence_nodes + corpus.claim_nodes]
    rows = []
    for name, kw in SETTINGS:
        times, labels = [], []
        for seed in range(args.seeds):
            t0 = time.perf_counter()
            labels.append(ThematicClusterer(n_clusters=args.clusters, random_state=seed, **kw).fit(X).labels_)
            times.append(time.perf_counter() - t0)
        nmi = np.mean([normalized_mutual_info_score(themes, lab) for lab in labels])
        ari = np.mean([adjusted_rand_score(labels[0], lab) for lab in labels[1:]]) if len(labels) > 1 else float("nan")
        rows.append([name, f"{np.median(times):.2f}", f"{nmi:.3f}", f"{ari:.3f}"])
        print(rows[-1], flush=True)
    print(f"\nFactVer {X.shape[0]} x {X.shape[1]} ({args.model}), t={args.clusters}, {args.seeds} seeds. {machine()}")
    print(table(rows, ["covariance", "fit s (median)", "theme NMI", "ARI between seeds"]))


if __name__ == "__main__":
    main()
