"""Research probe: the domain check per claim cluster against the corpus-wide one, on the archive halves.

Each archive claim (FactVer's tuning half, SciFact's train claims; ``benchmarks/verdict_evidence.py``'s JSON) is
read with its retrieved and with its annotated passages.  The reference is the same claims' retrieved readings,
labels unread.  ``global`` is the package's :class:`~llama_index_carag.verifier.domain.DomainThresholds`;
``cluster`` gives each claim the thresholds of its claim cluster (a diagonal Gaussian mixture of 10 components
on the default encoder's claim embeddings), shrunk towards the corpus's by ``n / (n + 20)`` and never under the
verifier's own 0.50.  Labels are scored only here.  Declared rule: ``cluster`` would be measured further only if
macro-F1 rose in every cell with S↔R not rising.  On FactVer's archive it lowered macro-F1 by 0.03-0.04 (more
NOT_ENOUGH_INFO), so it was not (docs/VERDICTS.md).

    python benchmarks/probe_cluster_domain_check.py --evidence evidence.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: Claim clusters, the pseudo-count of the shrinkage towards the corpus's thresholds.
CLUSTERS, PRIOR = 10, 20.0


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--evidence", required=True, help="the JSON of benchmarks/verdict_evidence.py")
    parser.add_argument("--domains", nargs="+", default=["factver", "scifact"])
    args = parser.parse_args(argv)

    from bench_verdicts import metrics
    from sentence_transformers import SentenceTransformer
    from sklearn.mixture import GaussianMixture

    from llama_index_carag.models.files import minilm_path
    from llama_index_carag.verifier.domain import SHARE, DomainThresholds
    from llama_index_carag.verifier.model import shipped_verifier

    verifier = shipped_verifier()
    encoder = SentenceTransformer(str(minilm_path()), device="cpu")
    data = json.loads(Path(args.evidence).read_text(encoding="utf-8"))
    for name in args.domains:
        items = data[name]["archive"]
        embedded = encoder.encode([it["claim"] for it in items], normalize_embeddings=True)
        cluster = GaussianMixture(CLUSTERS, covariance_type="diag", random_state=0).fit(embedded).predict(embedded)
        reference = verifier.batch_probabilities([(it["claim"], it["retrieved"] or [""]) for it in items])
        corpus = DomainThresholds().fit(reference)
        strongest = np.array([[p[:, 0].max(), p[:, 1].max()] for p in reference])
        gold = [it["gold"] for it in items]
        floor = verifier.threshold
        for source in ("retrieved", "annotated"):
            probs = reference
            if source == "annotated":
                probs = verifier.batch_probabilities([(it["claim"], it["annotated"] or [""]) for it in items])
            for mode in ("global", "cluster"):
                pred, conf = [], []
                for i, p in enumerate(probs):
                    t_s, t_r = corpus.supported_, corpus.refuted_
                    if mode == "cluster":
                        own = cluster == cluster[i]
                        n = float(own.sum())
                        q_s, q_r = (float(np.quantile(strongest[own, k], 1 - SHARE)) for k in range(2))
                        t_s = max(floor, (n * q_s + PRIOR * corpus.supported_) / (n + PRIOR))
                        t_r = max(floor, (n * q_r + PRIOR * corpus.refuted_) / (n + PRIOR))
                    verifier.threshold, verifier.refuted_threshold = t_s, t_r
                    decided = verifier.decide(p)
                    pred.append(decided.label)
                    conf.append(decided.confidence)
                verifier.threshold, verifier.refuted_threshold = floor, None
                row = metrics(gold, pred, conf)
                print(f"{name} archive {source:>9} {mode:>7}: {json.dumps(row)}", flush=True)


if __name__ == "__main__":
    main()
