"""The verdict benchmark of the archive decision: out of the box, label-free prior, archive decision.

Per domain (:mod:`research.archive_evidence`: FactVer archive = tuning half, report =
report half; SciFact archive = train claims, report = test claims) and evidence source (annotated,
retrieved), on the report claims of the verdict cache (their LLM scores read from it, 10 of each label):

* ``argmax`` — the plain arg-max of the whole-evidence label log-likelihoods (out of the box);
* ``prior`` — the same with the archive's label lean divided out (the label-free fallback; the lean is the
  mean label probability over the cache's archive rows of the same source, or of the annotated rows where
  the source has fewer than :data:`MIN_LEAN_ROWS`);
* ``model`` — the :class:`~llama_index_carag.verdicts.labels.archive_decision.ArchiveDecision`'s fitted model
  alone (no LLM), on ``n`` labelled archive claims (a seeded random sample of the archive);
* ``archive`` — the archive decision: the model and the LLM's lean-free scores together.

The decision is fitted on the archive claims' signals of the same source (retrieved: as a new claim would
be retrieved).  Metrics: accuracy, macro-F1, per-label recall, each predicted label's share, fit seconds.
The learning curve refits on ``sizes`` labelled claims (``repeats`` seeded samples each).

``python -m research.archive_bench`` (or ``python -m research.eval --verdicts``) prints the tables.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.verdicts.labels.archive_decision import ArchiveDecision, joint_matrix, llm_log_proba
from llama_index_carag.verdicts.labels.archive_features import archive_features
from llama_index_carag.verdicts.labels.stance import STANCE_ORDER, label_probabilities
from research.archive_evidence import ArchiveClaim, DomainEvidence
from research.verdict_metrics import LABELS, accuracy, macro_f1

logger = logging.getLogger(__name__)

__all__ = ["CACHES", "MIN_LEAN_ROWS", "cache_rows", "label_lean", "bench_domain", "learning_curve", "markdown"]

_RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
#: The verdict caches of the packaged Qwen on llama.cpp (report rows; archive rows for the lean), in the
#: source tree's ``docs/results``.
CACHES = tuple(
    str(_RESULTS / name)
    for name in (
        "verdict_cache_qwen_llamacpp.jsonl",
        "verdict_cache_qwen_llamacpp_archive.jsonl",
        "verdict_cache_qwen_llamacpp_archive_retrieved.jsonl",
    )
)
#: Fewest archive rows of a source to measure its own lean.
MIN_LEAN_ROWS = 20
_SHORT = {"SUPPORTED": "T", "REFUTED": "F", "NOT_ENOUGH_INFO": "N"}


def cache_rows(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """The claim rows with whole-evidence scores of the caches at ``paths`` (the last of each key kept)."""
    latest: dict[tuple[str, ...], dict[str, Any]] = {}
    for path in paths:
        with Path(path).open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line) if line.strip() else {}
                if row.get("kind") == "claim" and row.get("joint"):
                    row["split"] = row.get("split") or "report"
                    latest[(row["model"], row["domain"], row["evidence"], row["claim_id"], row["split"])] = row
    if len({r["model"] for r in latest.values()}) > 1:
        raise ValueError("The caches hold several LLMs' outputs; use one LLM at a time.")
    return list(latest.values())


def label_lean(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean label probabilities over ``rows``' whole-evidence scores (labels unread)."""
    if not rows:
        raise ValueError("No archive rows to measure the label lean on.")
    probs = np.mean([[label_probabilities(r["joint"])[k] for k in STANCE_ORDER] for r in rows], axis=0)
    return {k.value: float(p) for k, p in zip(STANCE_ORDER, probs)}


def _lean_rows(rows: Sequence[Mapping[str, Any]], domain: str, source: str) -> list[Mapping[str, Any]]:
    mine = [r for r in rows if r["domain"] == domain and r["split"] == "archive" and r["evidence"] == source]
    if len(mine) >= MIN_LEAN_ROWS:
        return mine
    return [r for r in rows if r["domain"] == domain and r["split"] == "archive" and r["evidence"] == "annotated"]


def _scores(gold: Sequence[str], pred: Sequence[str]) -> dict[str, float]:
    g, p = np.asarray(gold), np.asarray(pred)
    out = {"accuracy": accuracy(list(g), list(p)), "macro_f1": macro_f1(list(g), list(p))}
    for label in LABELS:
        out[f"recall_{label}"] = float(np.mean(p[g == label] == label)) if np.any(g == label) else float("nan")
        out[f"share_{label}"] = float(np.mean(p == label))
    return out


def _fit(claims: Sequence[ArchiveClaim], source: str) -> tuple[ArchiveDecision, float]:
    t0 = time.perf_counter()
    x = archive_features([c.signals[source] for c in claims])
    decision = ArchiveDecision().fit(x, [c.gold for c in claims])
    return decision, time.perf_counter() - t0


def _sample(archive: Sequence[ArchiveClaim], n: int | None, seed: int) -> list[ArchiveClaim]:
    if n is None or n >= len(archive):
        return list(archive)
    order = np.random.default_rng(seed).permutation(len(archive))
    return [archive[i] for i in order[:n]]


def bench_domain(
    domain: DomainEvidence, rows: Sequence[Mapping[str, Any]], source: str, n_archive: int | None = 100
) -> list[dict[str, Any]]:
    """The four decisions' scores on ``domain``'s report rows of ``source`` (see the module docstring)."""
    report = [r for r in rows if r["domain"] == domain.name and r["split"] == "report" and r["evidence"] == source]
    if not report:
        raise ValueError(f"The caches have no {domain.name} report rows with {source} evidence.")
    lean = label_lean(_lean_rows(rows, domain.name, source))
    gold = [r["gold"] for r in report]
    joint = joint_matrix([r["joint"] for r in report])
    x = archive_features([domain.report_signals(r) for r in report])
    decision, seconds = _fit(_sample(domain.archive, n_archive, 0), source)
    short = np.vectorize(lambda v: _SHORT[v])
    plain = [_SHORT[STANCE_ORDER[i].value] for i in joint.argmax(axis=1)]
    preds = {
        "argmax": plain,
        "prior": list(short(decision.classes_[llm_log_proba(joint, lean).argmax(axis=1)])),
        "model": list(short(decision.predict(x))),
        "archive": list(short(decision.predict(x, joint, lean))),
    }
    base = {"domain": domain.name, "evidence": source, "n_report": len(report), "n_archive": decision.n_labelled_}
    out = []
    for name, pred in preds.items():
        row = {**base, "decision": name, **_scores(gold, pred)}
        row["fit_s"] = round(seconds, 2) if name in ("model", "archive") else None
        row["note"] = decision.reason() if name == "archive" else ""
        out.append(row)
    return out


def learning_curve(
    domain: DomainEvidence,
    rows: Sequence[Mapping[str, Any]],
    source: str,
    sizes: Sequence[int | None] = (25, 50, 100, 200, None),
    repeats: int = 5,
) -> list[dict[str, Any]]:
    """Accuracy of ``model`` and ``archive`` over ``sizes`` labelled archive claims (``None``: all), mean and
    standard deviation over ``repeats`` seeded samples."""
    report = [r for r in rows if r["domain"] == domain.name and r["split"] == "report" and r["evidence"] == source]
    lean = label_lean(_lean_rows(rows, domain.name, source))
    gold = [r["gold"] for r in report]
    joint = joint_matrix([r["joint"] for r in report])
    x = archive_features([domain.report_signals(r) for r in report])
    out = []
    for n in sizes:
        acc: dict[str, list[float]] = {"model": [], "archive": []}
        kept = 0
        for seed in range(1 if n is None else repeats):
            decision, _ = _fit(_sample(domain.archive, n, seed), source)
            kept += int(decision.has_model)
            for name, pred in (("model", decision.predict(x)), ("archive", decision.predict(x, joint, lean))):
                acc[name].append(accuracy(gold, [_SHORT[p] for p in pred]))
        size = len(domain.archive) if n is None else n
        row = {"domain": domain.name, "evidence": source, "n_archive": size, "kept": f"{kept}/{len(acc['model'])}"}
        for name, values in acc.items():
            row[name] = f"{np.mean(values):.3f} ± {np.std(values):.3f}" if len(values) > 1 else f"{values[0]:.3f}"
        out.append(row)
    return out


def markdown(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A Markdown table of ``rows`` with ``columns`` (three decimals, ``—`` where there is no value)."""
    from research.runner import markdown_table

    return markdown_table(rows, columns, digits=3, missing="—")


TABLE_COLUMNS = (
    "domain", "evidence", "decision", "n_archive", "accuracy", "macro_f1",
    "recall_T", "recall_F", "recall_N", "share_T", "share_F", "share_N", "fit_s",
)  # fmt: skip
CURVE_COLUMNS = ("domain", "evidence", "n_archive", "kept", "model", "archive")


def run(
    factver: str | Path | None,
    scifact: str | Path | None,
    *,
    caches: Sequence[str | Path] = CACHES,
    cache_dir: str | None = None,
    n_archive: int | None = 100,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(table rows, learning-curve rows)`` for the domains given (their data paths)."""
    from research.archive_evidence import factver_evidence, scifact_evidence

    rows = cache_rows(caches)
    table: list[dict[str, Any]] = []
    curve: list[dict[str, Any]] = []
    domains = []
    if factver:
        domains.append(factver_evidence(factver, cache_dir=cache_dir))
    if scifact:
        domains.append(scifact_evidence(scifact, cache_dir=cache_dir))
    for domain in domains:
        for source in ("annotated", "retrieved"):
            table += bench_domain(domain, rows, source, n_archive)
            curve += learning_curve(domain, rows, source)
    return table, curve


def _main(argv: Sequence[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--factver", default="../shared/data/factver/factver_master.csv")
    p.add_argument("--scifact", default="../shared/data/scifact")
    p.add_argument("--cache-dir", default=None, help="embedding cache folder")
    p.add_argument("--n-archive", type=int, default=100, help="labelled archive claims of the main table")
    p.add_argument("--out", default=None, help="also write the tables and rows (JSON) to this folder")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    table, curve = run(args.factver, args.scifact, cache_dir=args.cache_dir, n_archive=args.n_archive)
    text = markdown(table, TABLE_COLUMNS) + "\n\nLearning curve (accuracy)\n\n" + markdown(curve, CURVE_COLUMNS)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "archive_decision.md").write_text(text + "\n", encoding="utf-8")
        (out / "archive_decision.json").write_text(json.dumps({"table": table, "curve": curve}, indent=1) + "\n")


if __name__ == "__main__":
    _main()
