"""A measured rule for NOT_ENOUGH_INFO: per-label offsets on the scored label log-likelihoods.

Local models scored by :class:`~llama_index_carag.label_scoring.HFLabelScorer`
rarely put NOT ENOUGH INFO first.  :class:`LabelBiasCalibrator` learns two
offsets (in nats) added to the REFUTED and NOT_ENOUGH_INFO log-likelihoods
(SUPPORTED stays at 0) by a grid search that maximises macro-F1 (ties: higher
accuracy, then the smaller total shift) on labelled claims — the FactVer
*tuning* half, never the report half.

:data:`MEASURED_LABEL_BIAS` holds the offsets measured that way for the offline
models (see ``docs/VERDICTS.md`` for the command); the synthesizer applies them
when it recognises the model, and any caller can pass its own.
"""

from __future__ import annotations

import logging
from typing import Mapping, Sequence

import numpy as np

from llama_index_carag.verdict import VerdictLabel

logger = logging.getLogger(__name__)

__all__ = ["LabelBiasCalibrator", "MEASURED_LABEL_BIAS", "measured_bias"]

_ORDER = (VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO)

#: Offsets chosen on FactVer's tuning half (docs/VERDICTS.md), keyed by the LLM's ``model_name``:
#: 9 balanced tuning-half claims x (annotated, retrieved top-6) evidence, prompts without node ids
#: (``carag eval --verdicts --per-label 4 --tune-per-label 3``; docs/results/verdicts_tuning_*.json).
#: Qwen puts REFUTED first for most claims, so its offsets move decisions towards SUPPORTED.
MEASURED_LABEL_BIAS: dict[str, dict[VerdictLabel, float]] = {
    "Qwen2.5-Coder-1.5B-Instruct": {
        VerdictLabel.SUPPORTED: 0.0, VerdictLabel.REFUTED: -3.25, VerdictLabel.NOT_ENOUGH_INFO: -2.25,
    },
    "SmolLM2-135M-Instruct": {
        VerdictLabel.SUPPORTED: 0.0, VerdictLabel.REFUTED: 5.5, VerdictLabel.NOT_ENOUGH_INFO: 2.25,
    },
}


def measured_bias(model_name: str | None) -> dict[VerdictLabel, float] | None:
    """The measured offsets for a model name (``None`` if that model was not measured)."""
    if not model_name:
        return None
    return MEASURED_LABEL_BIAS.get(str(model_name))


def _macro_f1(gold: np.ndarray, pred: np.ndarray) -> float:
    scores = []
    for c in range(3):
        tp = np.sum((gold == c) & (pred == c))
        fp = np.sum((gold != c) & (pred == c))
        fn = np.sum((gold == c) & (pred != c))
        if tp + fp + fn == 0:
            continue
        p = tp / (tp + fp) if tp + fp else 0.0
        r = tp / (tp + fn) if tp + fn else 0.0
        scores.append(2 * p * r / (p + r) if p + r else 0.0)
    return float(np.mean(scores)) if scores else 0.0


class LabelBiasCalibrator:
    """Fit REFUTED / NOT_ENOUGH_INFO offsets on labelled label-scores (scikit-learn style).

    Args:
        grid: candidate offsets in nats (the same grid for both labels).

    Attributes (after :meth:`fit`):
        bias_: ``{VerdictLabel: offset}`` (SUPPORTED is 0).
        score_: macro-F1 on the fitting data at ``bias_``.
        accuracy_: accuracy there.
    """

    def __init__(self, grid: Sequence[float] = tuple(np.round(np.arange(-4.0, 8.01, 0.25), 2))) -> None:
        self.grid = grid

    @staticmethod
    def _matrix(scores: Sequence[Mapping[VerdictLabel, float]]) -> np.ndarray:
        if not len(scores):
            raise ValueError("No label scores to calibrate on.")
        return np.asarray([[float(s[k]) for k in _ORDER] for s in scores], dtype=np.float64)

    def fit(self, scores: Sequence[Mapping[VerdictLabel, float]], gold: Sequence[VerdictLabel | str]) -> "LabelBiasCalibrator":
        """Grid-search the offsets; ``scores`` are :attr:`LabelScores.logprobs` mappings, ``gold`` their labels."""
        x = self._matrix(scores)
        if len(gold) != len(x):
            raise ValueError(f"{len(x)} score rows but {len(gold)} gold labels.")
        y = np.asarray([_ORDER.index(_label(g)) for g in gold])
        best: tuple[float, float, float] | None = None
        grid = np.asarray(self.grid, dtype=np.float64)
        for b_ref in grid:
            for b_nei in grid:
                pred = np.argmax(x + np.array([0.0, b_ref, b_nei]), axis=1)
                key = (_macro_f1(y, pred), float(np.mean(pred == y)), -(abs(b_ref) + abs(b_nei)))
                if best is None or key > best[0]:
                    best = (key, b_ref, b_nei)  # type: ignore[assignment]
        (f1, acc, _), b_ref, b_nei = best  # type: ignore[misc]
        self.bias_ = {VerdictLabel.SUPPORTED: 0.0, VerdictLabel.REFUTED: float(b_ref),
                      VerdictLabel.NOT_ENOUGH_INFO: float(b_nei)}
        self.score_, self.accuracy_ = f1, acc
        return self

    def predict(self, scores: Sequence[Mapping[VerdictLabel, float]]) -> list[VerdictLabel]:
        """The label with the highest biased log-likelihood, per row."""
        if not hasattr(self, "bias_"):
            raise RuntimeError("LabelBiasCalibrator is not fitted; call fit() first.")
        x = self._matrix(scores) + np.array([self.bias_[k] for k in _ORDER])
        return [_ORDER[i] for i in np.argmax(x, axis=1)]


def _label(value: VerdictLabel | str) -> VerdictLabel:
    return value if isinstance(value, VerdictLabel) else VerdictLabel.from_fever(value)
