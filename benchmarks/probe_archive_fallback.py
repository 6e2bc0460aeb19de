"""Research probe: what the archive fit should fall back on, judged on held-out tuning claims (no report claim read).

For each set, the archive split of the evidence JSON (``benchmarks/verdict_evidence.py``; FactVer's tuning half,
SciFact's train claims, at most ``--max-claims`` of them) is read once by the shipped verifier with each claim's
retrieved passages.  For each archive size and seed, ``archive_sample`` draws the archive; the other claims are
held out, and each verifier below is scored on them (claim-level macro-F1 after its abstention):

* ``A`` — out of the box: the domain check's thresholds on up to 200 of the split's claims (labels unread) and
  the pool's confidence map (what ``carag index`` gives without ``--calibrate``);
* ``B`` — the shipped candidate as ``--calibrate`` keeps it: thresholds from the archive's claims, a confidence
  map fitted on the archive;
* ``C`` — the head fitted on the archive, with the confidence map of its out-of-fold labels;
* ``R1`` — today's choice between B and C (out-of-fold macro-F1 on the archive, margin 0.02); ``R2`` — R1 with the
  gain also ahead in 95 % of bootstrap resamples; ``R3`` — A (scored on the archive as deployed) against C, margin
  0.02; ``R4`` — R3 with the bootstrap;
* ``Am`` — A with its confidence map refitted on the archive (A's raw decisions on the archive claims and their
  labels; the map also decides which labels are withheld under 50 %); ``A_ece`` / ``Am_ece``: the held-out
  expected calibration error (ten bins) of A and Am.

Fine-tunes are left out (minutes each).  Prints mean and standard deviation over the seeds per set and size.

    python benchmarks/probe_archive_fallback.py --evidence evidence.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

MARGIN, LEVEL = 0.02, 0.95


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--evidence", required=True, help="the JSON of benchmarks/verdict_evidence.py")
    parser.add_argument("--domains", nargs="+", default=["factver", "scifact"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[30, 100, 300])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--max-claims", type=int, default=500, help="archive-split claims read per set")
    args = parser.parse_args(argv)

    from bench_verdicts import archive_sample, metrics

    import llama_index_carag.verifier.archive as archive
    from llama_index_carag.verifier.confidence import confidence_of
    from llama_index_carag.verifier.domain import DomainThresholds, reference_sample
    from llama_index_carag.verifier.head import LabelHead
    from llama_index_carag.verifier.model import ClaimVerifier, shipped_verifier
    from llama_index_carag.verifier.training import claim_figures

    base = shipped_verifier()
    data = json.loads(Path(args.evidence).read_text(encoding="utf-8"))
    for name in args.domains:
        items = [it for it in data[name]["archive"] if it["retrieved"]][: args.max_claims]
        claims = [archive.ArchiveClaim(it["claim_id"], it["claim"], it["gold"], tuple(it["retrieved"])) for it in items]
        probs = archive._read(base, claims).probabilities
        of = {it["claim_id"]: i for i, it in enumerate(items)}
        gold_all = [c.label for c in claims]
        reference = DomainThresholds(floor=base.threshold).fit([probs[i] for i in reference_sample(len(claims))])
        a = ClaimVerifier(base.path)
        a.threshold, a.refuted_threshold = reference.supported_, reference.refuted_

        def held_f1(decide: Any, held: list[int], probs: list[Any] = probs, gold_all: list[str] = gold_all) -> float:
            return claim_figures([gold_all[i] for i in held], [decide(probs[i]).label for i in held])["macro_f1"]

        def held_ece(decide: Any, held: list[int], probs: list[Any] = probs, gold_all: list[str] = gold_all) -> float:
            decided = [decide(probs[i]) for i in held]
            gold = [gold_all[i] for i in held]
            return metrics(gold, [d.label for d in decided], [d.confidence for d in decided])["ece"]

        raw = ClaimVerifier(base.path)
        raw.threshold, raw.refuted_threshold, raw.confidence = a.threshold, a.refuted_threshold, None

        for n in args.sizes:
            if n >= len(claims) - 50:
                continue
            rows: dict[str, list[float]] = {
                k: [] for k in ("A", "B", "C", "R1", "R2", "R3", "R4", "Am", "A_ece", "Am_ece")
            }
            for seed in range(args.seeds):
                arch = [of[it["claim_id"]] for it in archive_sample(items, n, seed)]
                held = sorted(set(range(len(claims))) - set(arch))
                gold = [gold_all[i] for i in arch]
                p_arch = [probs[i] for i in arch]
                th = DomainThresholds(floor=base.threshold).fit(p_arch)
                b = ClaimVerifier(base.path)
                b.threshold, b.refuted_threshold, b.confidence = th.supported_, th.refuted_, None
                b_decided = [b.decide(p) for p in p_arch]
                b.confidence = confidence_of(b_decided, gold)
                c_decided = archive._head_out_of_fold(base, p_arch, gold)
                c = ClaimVerifier(base.path)
                c.head = LabelHead().fit(p_arch, gold)
                c.confidence = confidence_of(c_decided, gold)
                final = {
                    "B": archive._abstained(b_decided, gold),
                    "C": archive._abstained(c_decided, gold),
                    "A": [a.decide(p).label for p in p_arch],  # as deployed: the pool's map, nothing fitted
                }
                f1 = {k: claim_figures(gold, v)["macro_f1"] for k, v in final.items()}
                held_scores = {k: held_f1(v.decide, held) for k, v in (("A", a), ("B", b), ("C", c))}
                for k in ("A", "B", "C"):
                    rows[k].append(held_scores[k])
                am = ClaimVerifier(base.path)
                am.threshold, am.refuted_threshold = a.threshold, a.refuted_threshold
                am.confidence = confidence_of([raw.decide(p) for p in p_arch], gold)
                rows["Am"].append(held_f1(am.decide, held))
                rows["A_ece"].append(held_ece(a.decide, held))
                rows["Am_ece"].append(held_ece(am.decide, held))
                for rule, fallback, strict in (
                    ("R1", "B", False),
                    ("R2", "B", True),
                    ("R3", "A", False),
                    ("R4", "A", True),
                ):
                    gain = f1["C"] - f1[fallback]
                    wins = gain >= MARGIN and (
                        not strict or archive.gain_share(gold, final["C"], final[fallback]) >= LEVEL
                    )
                    rows[rule].append(held_scores["C" if wins else fallback])
            summary = "  ".join(f"{k} {np.mean(v):.3f}±{np.std(v):.3f}" for k, v in rows.items())
            print(f"{name} n={n} held={len(claims) - n}: {summary}", flush=True)


if __name__ == "__main__":
    main()
