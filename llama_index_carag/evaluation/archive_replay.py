"""The archive decision replayed on the verdict caches (no LLM call): fitted per archive, reported on report claims.

Per domain (FactVer: archive = tuning-half claims, report = report-half claims; SciFact: archive = train
claims, report = test claims) and evidence source (annotated; retrieved where the caches have it), three
decisions on the same cached scores:

* ``argmax`` — the plain arg-max of the whole-evidence label log-likelihoods (out of the box);
* ``prior`` — the same with the archive's label lean (mean label probabilities over the archive rows of the
  same evidence, labels unread) divided out;
* ``archive`` — :class:`~llama_index_carag.verdicts.labels.archive_decision.ArchiveDecision` fitted on the
  archive rows *with* their labels (falls back to ``prior`` by its declared rule); on retrieved evidence also
  ``archive(annotated fit)``: fitted on the annotated archive, applied to the retrieved report evidence.

Features: the groups of :mod:`~llama_index_carag.verdicts.labels.archive_features` that every archive and
report row of the comparison has (named in the table's ``features`` column).  The caches hold no BM25 score
and no SOI membership; the passages' texts for the refutation cues are looked up by id in the data sets
(:func:`passage_texts`).  The learning curve refits on random subsets of the annotated archive: the caches
hold 30 archive claims per domain, so 25/50/100/200 need new collection.

``python -m llama_index_carag.evaluation.archive_replay`` prints the Markdown tables.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.evaluation.verdicts import LABELS, accuracy, macro_f1
from llama_index_carag.verdicts.labels.archive_decision import ArchiveDecision
from llama_index_carag.verdicts.labels.archive_features import (
    ClaimSignals,
    archive_features,
    available_groups,
)
from llama_index_carag.verdicts.labels.stance import STANCE_ORDER
from llama_index_carag.verdicts.types import VerdictLabel

logger = logging.getLogger(__name__)

__all__ = ["CACHES", "replay_rows", "passage_texts", "replay", "learning_curve", "markdown"]

#: The verdict caches of the packaged Qwen on llama.cpp (report rows, archive rows, retrieved archive rows).
CACHES = (
    "docs/results/verdict_cache_qwen_llamacpp.jsonl",
    "docs/results/verdict_cache_qwen_llamacpp_archive.jsonl",
    "docs/results/verdict_cache_qwen_llamacpp_archive_retrieved.jsonl",
)
_SHORT = {"SUPPORTED": "T", "REFUTED": "F", "NOT_ENOUGH_INFO": "N"}


def replay_rows(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """The claim rows of the caches at ``paths`` that have whole-evidence scores, the last of each key kept."""
    latest: dict[tuple[str, ...], dict[str, Any]] = {}
    for path in paths:
        with Path(path).open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line) if line.strip() else {}
                if row.get("kind") == "claim" and row.get("joint"):
                    row["split"] = row.get("split") or "report"
                    latest[(row["model"], row["domain"], row["evidence"], row["claim_id"], row["split"])] = row
    if len({r["model"] for r in latest.values()}) > 1:
        raise ValueError("The caches hold several LLMs' outputs; replay one LLM at a time.")
    return list(latest.values())


def passage_texts(factver_csv: str | Path | None, scifact_dir: str | Path | None) -> dict[str, str]:
    """``{passage id: text}``: FactVer evidence and claims by id, SciFact abstracts (title and text) by id."""
    import csv

    texts: dict[str, str] = {}
    if factver_csv and Path(factver_csv).is_file():
        with Path(factver_csv).open(newline="", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                texts[r["Evidence_topic_id"]] = r["Evidence_text"]
                texts[r["Claim_topic_id"]] = r["Claim_text"]
    corpus = Path(scifact_dir) / "corpus.jsonl" if scifact_dir else None
    if corpus is not None and corpus.is_file():
        with corpus.open(encoding="utf-8") as fh:
            for line in fh:
                doc = json.loads(line)
                texts[str(doc["_id"])] = f"{doc.get('title', '')}\n{doc.get('text', '')}".strip()
    return texts


def _signals(row: Mapping[str, Any], texts: Mapping[str, str]) -> ClaimSignals:
    ids = [str(i) for i in row["passage_ids"]]
    found = [texts[i] for i in ids if i in texts]
    return ClaimSignals.from_cache_row(row, found if ids and len(found) == len(ids) else None)


def _metrics(gold: Sequence[str], pred: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"claims": len(gold), "accuracy": accuracy(gold, pred), "macro_F1": macro_f1(gold, pred)}
    for c in LABELS:
        hits = [p == c for g, p in zip(gold, pred) if g == c]
        out[f"recall_{c}"] = float(np.mean(hits)) if hits else float("nan")
    share = Counter(pred)
    out.update({f"share_{c}": share[c] / len(pred) for c in LABELS})
    return out


def _short(labels: Sequence[Any] | np.ndarray) -> list[str]:
    return [_SHORT[str(v)] for v in labels]


def _fit(archive: Sequence[Mapping[str, Any]], groups: Sequence[str], texts: Mapping[str, str], **params: Any) -> Any:
    x = archive_features([_signals(r, texts) for r in archive], groups)
    y = [VerdictLabel.from_fever(r["gold"]) for r in archive]
    return ArchiveDecision(**params).fit(x, y)


def _compare(
    archive: Sequence[Mapping[str, Any]],
    report: Sequence[Mapping[str, Any]],
    texts: Mapping[str, str],
    annotated_archive: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The three decisions (and the annotated fit on retrieved evidence) on ``report``, fitted on ``archive``."""
    gold = [r["gold"] for r in report]
    groups = available_groups([_signals(r, texts) for r in [*archive, *report]])
    x = archive_features([_signals(r, texts) for r in report], groups)
    label_free = ArchiveDecision(min_claims=10**9).fit(
        archive_features([_signals(r, texts) for r in archive], groups), [r["gold"] for r in archive]
    )
    fitted = _fit(archive, groups, texts)
    plain = _short([STANCE_ORDER[i].value for i in x[:, :3].argmax(axis=1)])
    rows = [
        {"decision": "argmax", "fit": "-", "features": "joint", **_metrics(gold, plain)},
        {
            "decision": "prior",
            "fit": f"{len(archive)} unlabelled",
            "features": "joint",
            **_metrics(gold, _short(label_free.predict(x))),
        },
        {
            "decision": "archive",
            "fit": _fit_note(fitted),
            "features": "+".join(groups),
            **_metrics(gold, _short(fitted.predict(x))),
        },
    ]
    if annotated_archive:
        both = available_groups([_signals(r, texts) for r in [*annotated_archive, *report]])
        cross = _fit(annotated_archive, both, texts)
        xb = archive_features([_signals(r, texts) for r in report], both)
        rows.append(
            {
                "decision": "archive(annotated fit)",
                "fit": _fit_note(cross),
                "features": "+".join(both),
                **_metrics(gold, _short(cross.predict(xb))),
            }
        )
    return rows


def _fit_note(d: ArchiveDecision) -> str:
    counts = "/".join(str(d.label_counts_[k]) for k in ("SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"))
    cv = "" if not d.cv_scores_ else f"; CV {max(d.cv_scores_.values()):.3f} vs prior {d.prior_score_:.3f}"
    return f"{d.n_labelled_} (T/F/N {counts}) -> {d.choice_}{cv}"


def replay(rows: Sequence[Mapping[str, Any]], texts: Mapping[str, str]) -> list[dict[str, Any]]:
    """One table row per (domain, evidence, decision) (module docstring)."""
    out = []
    for domain in sorted({r["domain"] for r in rows}):
        mine = [r for r in rows if r["domain"] == domain]
        for evidence in ("annotated", "retrieved"):
            archive = [r for r in mine if r["split"] == "archive" and r["evidence"] == evidence]
            report = [r for r in mine if r["split"] == "report" and r["evidence"] == evidence]
            if not archive or not report:
                continue
            annotated = None
            if evidence != "annotated":
                annotated = [r for r in mine if r["split"] == "archive" and r["evidence"] == "annotated"]
            for row in _compare(archive, report, texts, annotated):
                out.append({"domain": domain, "evidence": evidence, **row})
    return out


def learning_curve(
    rows: Sequence[Mapping[str, Any]],
    texts: Mapping[str, str],
    sizes: Sequence[int] = (12, 18, 24, 30),
    repeats: int = 10,
) -> list[dict[str, Any]]:
    """The archive decision (annotated evidence) fitted on random subsets of ``sizes`` archive claims.

    Per size the mean over ``repeats`` seeded subsets of the report accuracy and macro-F1, and how often the
    decision fell back to the prior; also the same fits with the minimum lowered to 2 per label (diagnostic:
    what the logistic candidates would do below the declared minimum).
    """
    out = []
    for domain in sorted({r["domain"] for r in rows}):
        archive = [
            r for r in rows if r["domain"] == domain and r["split"] == "archive" and r["evidence"] == "annotated"
        ]
        report = [r for r in rows if r["domain"] == domain and r["split"] == "report" and r["evidence"] == "annotated"]
        if not archive or not report:
            continue
        groups = available_groups([_signals(r, texts) for r in [*archive, *report]])
        x = archive_features([_signals(r, texts) for r in report], groups)
        gold = [r["gold"] for r in report]
        for size in [s for s in sizes if s <= len(archive)]:
            for label, params in (("declared", {}), ("no minimum", {"min_claims": 0, "min_per_label": 2})):
                out.append(
                    {
                        "domain": domain,
                        "archive_claims": size,
                        "rule": label,
                        **_curve_point(archive, x, gold, groups, texts, size, repeats, params),
                    }
                )
    return out


def _curve_point(
    archive: Sequence[Mapping[str, Any]],
    x: np.ndarray,
    gold: Sequence[str],
    groups: Sequence[str],
    texts: Mapping[str, str],
    size: int,
    repeats: int,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    accs, f1s, fallbacks, skipped = [], [], 0, 0
    for seed in range(repeats):
        pick = np.random.default_rng(seed).permutation(len(archive))[:size]
        subset = [archive[i] for i in pick]
        if params and min(Counter(r["gold"] for r in subset).get(c, 0) for c in LABELS) < 2:
            skipped += 1  # a label with < 2 claims: no stratified fold
            continue
        decision = _fit(subset, groups, texts, **params)
        pred = _short(decision.predict(x))
        accs.append(accuracy(gold, pred))
        f1s.append(macro_f1(gold, pred))
        fallbacks += decision.choice_ == "prior"
    fitted = len(accs)
    return {
        "fits": fitted,
        "accuracy": float(np.mean(accs)) if accs else float("nan"),
        "macro_F1": float(np.mean(f1s)) if f1s else float("nan"),
        "prior_share": fallbacks / fitted if fitted else float("nan"),
        "skipped": skipped,
    }


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """``rows`` as a Markdown table (their keys as columns, floats to 3 places, NaN as ``-``)."""
    if not rows:
        return "(no rows)\n"
    columns = list(rows[0])

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "-" if np.isnan(v) else f"{v:.3f}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _main(argv: Sequence[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--caches", default=",".join(CACHES), help="comma-separated verdict-cache JSONL files")
    p.add_argument("--factver", default="../shared/data/factver/factver_master.csv")
    p.add_argument("--scifact", default="../shared/data/scifact")
    p.add_argument("--repeats", type=int, default=10, help="random archive subsets per learning-curve size")
    args = p.parse_args(argv)
    rows = replay_rows(args.caches.split(","))
    texts = passage_texts(args.factver, args.scifact)
    print("## Archive decision, replayed on the verdict caches\n")
    print(markdown(replay(rows, texts)))
    print("## Learning curve (annotated evidence; the caches hold 30 archive claims per domain)\n")
    print(markdown(learning_curve(rows, texts, repeats=args.repeats)))


if __name__ == "__main__":
    _main()
