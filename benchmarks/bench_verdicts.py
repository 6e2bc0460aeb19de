"""Verdict benchmark of the claim verifier: FactVer's report half and SciFact's test claims, all of them.

Reads the claims and their evidence from ``benchmarks/verdict_evidence.py``'s JSON (annotated evidence and the
package default retriever's top 6, new-claims protocol) and reports, per domain and evidence source:

* ``verifier`` — the shipped verifier with its own threshold (it never saw FactVer or SciFact);
* ``verifier + domain check`` — out of the box as ``carag index`` leaves it: the shipped verifier with the
  thresholds of :mod:`~llama_index_carag.verifier.domain`, fitted on the archive's claims **without their labels**
  (a seeded sample of 200, each with the evidence the retriever gives it);
* ``verifier + archive (N)`` — :func:`~llama_index_carag.verifier.archive.fit_archive_verifier` on ``N`` labelled
  claims of the domain's archive (FactVer's tuning half, SciFact's train claims; a seeded sample in the archive's
  label proportions, ``--labels``, default 30, 100, 300) with the evidence the retriever gives them, as
  ``carag index --calibrate`` does, then the report claims;
* ``claim only`` — the same two verifiers with every passage replaced by an empty one: what the claim's wording
  alone gives away.

Accuracy, macro-F1, recall per label, each predicted label's share, the share of claims called the opposite of
the truth (``s_r``: SUPPORTED for a refuted claim or REFUTED for a supported one), the mean confidence and its
expected calibration error (``ece``: ten equal-width bins, |mean confidence − accuracy| weighted by the bin's
share), the share of claims called REFUTED with a confidence the CLI calls at least "likely" (0.70) that are not
refuted (``likely_false_r``: the confident false REFUTED a fact-checker fears most), seconds per verdict, on all
report claims and on a balanced subset (as many claims of each label as the rarest label has, the first in file
order).  Pair level, each annotated passage with its claim's label: the AUC of P(S) − P(R) between supporting
and refuting pairs, and of P(NEI) between silent pairs and the rest (``pairs`` in the JSON).
Writes ``docs/results/verifier_<domain>.json`` and prints Markdown tables.

    python benchmarks/verdict_evidence.py --out /tmp/evidence.json --cache-dir /tmp/emb
    python benchmarks/bench_verdicts.py --evidence /tmp/evidence.json [--domains factver scifact] [--no-archive]
        [--labels 30 100 300]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.verdicts.types import CONFIDENCE_WORDS

REPO = Path(__file__).resolve().parents[1]
LABELS = ("SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO")
SHORT = {"SUPPORTED": "S", "REFUTED": "R", "NOT_ENOUGH_INFO": "N"}
#: The confidence the CLI first calls "likely" (0.70).
LIKELY = next(at for at, word in CONFIDENCE_WORDS if word == "likely")


def metrics(gold: Sequence[str], pred: Sequence[str], confidence: Sequence[float] | None = None) -> dict[str, float]:
    """Accuracy, macro-F1, recall per label, predicted share per label, S<->R share; with ``confidence``, its mean,
    expected calibration error and the share of claims falsely called REFUTED at a "likely" confidence or more."""
    out: dict[str, float] = {"claims": len(gold), "accuracy": float(np.mean([g == p for g, p in zip(gold, pred)]))}
    f1s = []
    for k in LABELS:
        tp = sum(g == k and p == k for g, p in zip(gold, pred))
        fp = sum(g != k and p == k for g, p in zip(gold, pred))
        fn = sum(g == k and p != k for g, p in zip(gold, pred))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
        n = sum(g == k for g in gold)
        out[f"recall_{SHORT[k]}"] = tp / n if n else float("nan")
        out[f"share_{SHORT[k]}"] = sum(p == k for p in pred) / len(pred)
    out["macro_f1"] = float(np.mean(f1s))
    opposite = {("SUPPORTED", "REFUTED"), ("REFUTED", "SUPPORTED")}
    out["s_r"] = sum((g, p) in opposite for g, p in zip(gold, pred)) / len(gold)
    if confidence is not None:
        conf = np.asarray(confidence, dtype=np.float64)
        right = np.array([g == p for g, p in zip(gold, pred)], dtype=np.float64)
        bins = np.minimum((conf * 10).astype(int), 9)
        out["confidence"] = float(conf.mean())
        sure_r = [p == "REFUTED" and g != "REFUTED" and c >= LIKELY for g, p, c in zip(gold, pred, conf)]
        out["likely_false_r"] = float(np.mean(sure_r))
        out["ece"] = float(
            sum(abs(conf[bins == b].mean() - right[bins == b].mean()) * (bins == b).sum() for b in set(bins))
            / len(conf)
        )
    return out


def archive_sample(items: Sequence[dict[str, Any]], n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` archive claims (all when fewer), each label in its archive share (at least one), a seeded sample."""
    import random

    if n >= len(items):
        return list(items)
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for k in LABELS:
        of_k = [it for it in items if it["gold"] == k]
        out += rng.sample(of_k, min(len(of_k), max(1, round(n * len(of_k) / len(items)))))
    return out


def pair_aucs(verifier: Any, items: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Pair level on the annotated evidence: AUC of P(S) - P(R), supporting against refuting pairs; AUC of P(NEI),
    silent pairs against the rest."""
    probs = verifier.batch_probabilities([(it["claim"], it["annotated"]) for it in items if it["annotated"]])
    gold = [it["gold"] for it in items if it["annotated"] for _ in it["annotated"]]
    return {"pairs": len(gold), **row_aucs(np.concatenate(probs), np.array(gold))}


def row_aucs(rows: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """``auc_s_vs_r`` and ``auc_nei`` of probability rows (S, R, NEI) against their pairs' labels."""
    from sklearn.metrics import roc_auc_score

    sr = labels != "NOT_ENOUGH_INFO"
    return {
        "auc_s_vs_r": float(roc_auc_score(labels[sr] == "SUPPORTED", rows[sr, 0] - rows[sr, 1])),
        "auc_nei": float(roc_auc_score(labels == "NOT_ENOUGH_INFO", rows[:, 2])),
    }


def domain_checked(items: Sequence[dict[str, Any]], folder: Path) -> Any:
    """The shipped verifier with the domain check fitted on ``items`` (their retrieved evidence, no labels)."""
    from llama_index_carag.verifier.domain import fit_domain_verifier
    from llama_index_carag.verifier.model import ClaimVerifier

    record = fit_domain_verifier([(it["claim"], it["retrieved"]) for it in items], folder)
    print(f"domain check: {record}")
    return ClaimVerifier(folder)


def balanced(items: Sequence[dict[str, Any]]) -> list[int]:
    """Indices of a balanced subset: the first ``m`` claims of each label, ``m`` the rarest label's count."""
    m = min(sum(it["gold"] == k for it in items) for k in LABELS)
    out: list[int] = []
    for k in LABELS:
        out += [i for i, it in enumerate(items) if it["gold"] == k][:m]
    return sorted(out)


def run(
    verifier: Any, items: Sequence[dict[str, Any]], source: str, claim_only: bool = False
) -> tuple[list, list, float]:
    """Labels and confidences for ``items`` on ``source`` evidence (``claim_only``: one empty passage), and seconds
    per verdict."""
    t0 = time.perf_counter()
    work = [(it["claim"], [""] if claim_only else (it[source] or [""])) for it in items]
    decided = [verifier.decide(p) for p in verifier.batch_probabilities(work)]
    return [d.label for d in decided], [d.confidence for d in decided], (time.perf_counter() - t0) / max(len(items), 1)


def table(rows: list[dict[str, Any]]) -> str:
    cols = ["method", "evidence", "subset", "claims", "accuracy", "macro_f1", "recall_S", "recall_R", "recall_N"]
    cols += ["share_S", "share_R", "share_N", "s_r", "confidence", "ece", "likely_false_r", "s_per_verdict"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bench_domain(
    name: str, data: dict[str, Any], labels: Sequence[int], out_dir: Path, fitted: str | None = None
) -> dict[str, Any]:
    from llama_index_carag.verifier.archive import ArchiveClaim, fit_archive_verifier
    from llama_index_carag.verifier.model import ClaimVerifier, index_verifier, shipped_verifier

    report = data["report"]
    verifiers = {"verifier": shipped_verifier()}
    verifiers["verifier + domain check"] = domain_checked(data["archive"], out_dir / f"domain_verifier_{name}")
    record: dict[str, Any] = {"domain": name, "report_claims": len(report), "rows": []}
    record["domain_check"] = verifiers["verifier + domain check"].record["domain_check"]
    record["pairs"] = pair_aucs(shipped_verifier(), report)
    record["archive"] = {}
    if fitted is not None:  # an index's verifier, fitted by carag index --calibrate on this domain's archive
        found = index_verifier(fitted)
        record["archive"]["index"] = found.record.get("archive", {}) if found is not None else {"choice": "shipped"}
        verifiers["verifier + archive (index)"] = found or shipped_verifier()
    for n in labels:
        sample = archive_sample(data["archive"], n)
        claims = [
            ArchiveClaim(a["claim_id"], a["claim"], a["gold"], tuple(a["retrieved"]), tuple(a["annotated"]))
            for a in sample
        ]
        folder = out_dir / f"archive_verifier_{name}_{n}"
        fit = fit_archive_verifier(claims, folder, out_of_box=verifiers["verifier + domain check"])
        record["archive"][str(n)] = fit
        verifiers[f"verifier + archive ({n})"] = ClaimVerifier(folder)
        if fit["choice"] == "fine-tune":
            record["pairs_archive_" + str(n)] = pair_aucs(verifiers[f"verifier + archive ({n})"], report)
        print(f"{name}: archive verifier on {n} labels: {fit['choice']} in {fit['seconds']:.0f} s", flush=True)
    gold = [it["gold"] for it in report]
    subset = balanced(report)
    for method, verifier in verifiers.items():
        for source in ("annotated", "retrieved", "claim only"):
            pred, conf, sec = run(verifier, report, source, claim_only=source == "claim only")
            for which, idx in (("all", range(len(report))), ("balanced", subset)):
                row = metrics([gold[i] for i in idx], [pred[i] for i in idx], [conf[i] for i in idx])
                row.update(method=method, evidence=source, subset=which, s_per_verdict=sec)
                record["rows"].append(row)
    return record


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--evidence", required=True, help="benchmarks/verdict_evidence.py's JSON")
    parser.add_argument("--domains", nargs="+", default=["factver", "scifact"])
    parser.add_argument("--no-archive", action="store_true", help="the shipped verifier only")
    parser.add_argument("--labels", nargs="+", type=int, default=[30, 100, 300], help="archive sizes to fit")
    parser.add_argument("--out-dir", default=str(REPO / "docs" / "results"))
    parser.add_argument("--work-dir", default="/tmp/carag-bench-verdicts", help="archive verifiers (not committed)")
    parser.add_argument(
        "--index",
        action="append",
        default=[],
        metavar="DOMAIN=DIR",
        help="use the archive verifier of an index built by carag index --calibrate on DOMAIN's archive",
    )
    args = parser.parse_args(argv)
    evidence = json.loads(Path(args.evidence).read_text(encoding="utf-8"))
    out_dir, work = Path(args.out_dir), Path(args.work_dir)
    for folder in (out_dir, work):  # before the fits: a record is not lost to a missing folder
        folder.mkdir(parents=True, exist_ok=True)
    indexes = dict(item.split("=", 1) for item in args.index)
    for name in args.domains:
        labels = [] if args.no_archive else args.labels
        record = bench_domain(name, evidence[name], labels, work, indexes.get(name))
        print(f"\n## {name} ({record['report_claims']} report claims; pairs {record['pairs']})")
        print(f"\n{table(record['rows'])}")
        (out_dir / f"verifier_{name}.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
