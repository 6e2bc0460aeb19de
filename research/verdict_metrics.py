"""Verdict metrics: accuracy and macro-F1 of predicted labels against FactVer's T/F/N."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["LABELS", "accuracy", "macro_f1", "confusion"]

#: FactVer's labels: T (supported), F (refuted), N (not enough info).
LABELS = ("T", "F", "N")


def _check(gold: Sequence[str], pred: Sequence[str]) -> None:
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} labels but pred has {len(pred)}.")
    bad = sorted({x for x in [*gold, *pred] if x not in LABELS})
    if bad:
        raise ValueError(f"Labels must be T, F or N; got {bad}.")


def accuracy(gold: Sequence[str], pred: Sequence[str]) -> float:
    """Share of claims whose predicted label equals the gold label (NaN for no claims)."""
    _check(gold, pred)
    if not gold:
        return float("nan")
    return sum(g == p for g, p in zip(gold, pred)) / len(gold)


def confusion(gold: Sequence[str], pred: Sequence[str]) -> dict[str, dict[str, int]]:
    """``{gold_label: {pred_label: count}}`` over T/F/N."""
    _check(gold, pred)
    table = {g: {p: 0 for p in LABELS} for g in LABELS}
    for g, p in zip(gold, pred):
        table[g][p] += 1
    return table


def macro_f1(gold: Sequence[str], pred: Sequence[str]) -> float:
    """Unweighted mean over T, F, N of the per-label F1.

    Per label ``c``: ``precision = TP/(TP+FP)``, ``recall = TP/(TP+FN)``,
    ``F1 = 2PR/(P+R)``, with 0 when the denominator is 0.  Labels absent from
    both gold and predictions are left out of the mean (NaN if none remain).
    """
    _check(gold, pred)
    scores = []
    for c in LABELS:
        tp = sum(g == c and p == c for g, p in zip(gold, pred))
        fp = sum(g != c and p == c for g, p in zip(gold, pred))
        fn = sum(g == c and p != c for g, p in zip(gold, pred))
        if tp + fp + fn == 0:
            continue
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        scores.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    return sum(scores) / len(scores) if scores else float("nan")
