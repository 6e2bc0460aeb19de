"""Research probe: the shipped verifier's confidence map fitted on VitaminC (a domain it never trained on).

The shipped map (``LabelConfidence``) is fitted on the pool's validation claims, in the verifier's own domains, and
is over-sure on new ones.  This probe fits the same map on 500 seeded ``vitaminc.csv`` pairs per label (each pair
one claim with one passage, the shipped rule at 0.50) and compares both maps out of the box on the archive halves
(``benchmarks/verdict_evidence.py``'s JSON; the domain check fitted on the same claims' retrieved readings,
labels unread; SciFact: a seeded 200 of its train claims).  Declared rule: the VitaminC map would replace the
pool's only if ECE fell in every cell and macro-F1 fell by at most 0.01.  On FactVer's tuning half it abstained
on 93-95 % of the claims (macro-F1 0.478 → 0.191), so it was not (docs/VERDICTS.md).

    python benchmarks/probe_vitaminc_confidence.py --evidence evidence.json --domains factver
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VITAMINC = REPO.parent / "shared" / "data" / "verifier_pool" / "vitaminc.csv"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--evidence", required=True, help="the JSON of benchmarks/verdict_evidence.py")
    parser.add_argument("--domains", nargs="+", default=["factver", "scifact"])
    parser.add_argument("--vitaminc", type=Path, default=VITAMINC)
    args = parser.parse_args(argv)

    from bench_verdicts import metrics

    from llama_index_carag.verdicts.types import LABELS
    from llama_index_carag.verifier.confidence import confidence_of
    from llama_index_carag.verifier.domain import DomainThresholds
    from llama_index_carag.verifier.model import decide_label, shipped_verifier
    from llama_index_carag.verifier.pairs import read_pairs

    verifier = shipped_verifier()
    pairs = read_pairs(args.vitaminc)
    rng = random.Random(0)
    sample = [p for k in LABELS for p in rng.sample([p for p in pairs if p.label == k], 500)]
    probs = verifier.batch_probabilities([(p.claim, [p.passage]) for p in sample])
    decided = [decide_label(p, verifier.threshold) for p in probs]
    maps = {"pool": verifier.confidence, "vitaminc": confidence_of(decided, [p.label for p in sample])}
    print(f"VitaminC at the shipped rule: {json.dumps(metrics([p.label for p in sample], [d.label for d in decided]))}")
    data = json.loads(Path(args.evidence).read_text(encoding="utf-8"))
    for name in args.domains:
        items = data[name]["archive"]
        if len(items) > 300:
            items = [items[i] for i in sorted(random.Random(0).sample(range(len(items)), 200))]
        reference = verifier.batch_probabilities([(it["claim"], it["retrieved"] or [""]) for it in items])
        thresholds = DomainThresholds().fit(reference)
        gold = [it["gold"] for it in items]
        for source in ("retrieved", "annotated"):
            read = reference
            if source == "annotated":
                read = verifier.batch_probabilities([(it["claim"], it["annotated"] or [""]) for it in items])
            for map_name, confidence in maps.items():
                verifier.threshold, verifier.refuted_threshold = thresholds.supported_, thresholds.refuted_
                verifier.confidence = confidence
                found = [verifier.decide(p) for p in read]
                row = metrics(gold, [f.label for f in found], [f.confidence for f in found])
                print(f"{name} archive {source} {map_name} map: {json.dumps(row)}", flush=True)


if __name__ == "__main__":
    main()
