"""A measured rule for NOT_ENOUGH_INFO: per-label offsets on the scored label log-likelihoods.

Local models whose labels are scored (:class:`~llama_index_carag.verdicts.labels.label_scorer.LabelScorer`)
rarely put NOT ENOUGH INFO first.  :class:`LabelBiasCalibrator` learns two
offsets (in nats) added to the REFUTED and NOT_ENOUGH_INFO log-likelihoods
(SUPPORTED stays at 0) by a grid search that maximises macro-F1 (ties: higher
accuracy, then the smaller total shift) on labelled claims — the FactVer
*tuning* half, never the report half.  Given the claims as ``groups``, the offsets
are kept only if they beat no offsets in grouped cross-validation (macro-F1);
otherwise they are all 0 — on a few dozen rows a grid search mostly fits noise.

:data:`MEASURED_LABEL_BIAS` holds the offsets measured that way for the offline
models (``python -m research.eval --verdicts --tune-per-label N``, :mod:`research.verdict_bench`): all 0,
so the package applies none.  A caller can still pass its own offsets to the package's arg-max decision
(``VerdictSettings.label_bias``).  Research code: the package does not import this module.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np

from llama_index_carag.verdicts import VerdictLabel

logger = logging.getLogger(__name__)

__all__ = ["LabelBiasCalibrator", "MEASURED_LABEL_BIAS", "measured_bias"]

_ORDER = (VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO)

#: Offsets chosen on FactVer's tuning half (docs/VERDICTS.md), keyed by the LLM's ``model_name``:
#: 9 balanced tuning-half claims x (annotated, default retriever's top-6) evidence, prompts without
#: node ids (``python -m research.eval --verdicts --per-label 4 --tune-per-label 3``;
#: docs/results/verdicts_tuning_*.json).
#: For both models the grid's offsets lost to no offsets in grouped 3-fold cross-validation (macro-F1
#: Qwen 0.36 vs 0.45, SmolLM2 0.13 vs 0.27), so they are 0: the plain arg-max is used.
MEASURED_LABEL_BIAS: dict[str, dict[VerdictLabel, float]] = {
    "Qwen2.5-Coder-1.5B-Instruct": {
        VerdictLabel.SUPPORTED: 0.0,
        VerdictLabel.REFUTED: 0.0,
        VerdictLabel.NOT_ENOUGH_INFO: 0.0,
    },
    "SmolLM2-135M-Instruct": {
        VerdictLabel.SUPPORTED: 0.0,
        VerdictLabel.REFUTED: 0.0,
        VerdictLabel.NOT_ENOUGH_INFO: 0.0,
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
        cv: folds of the grouped cross-validation that decides whether offsets are kept.

    Attributes (after :meth:`fit`):
        bias_: ``{VerdictLabel: offset}`` (SUPPORTED is 0).
        score_: macro-F1 on the fitting data at ``bias_``.
        accuracy_: accuracy there.
        cv_scores_: ``{"offsets": macro-F1, "none": macro-F1}`` out of fold (with ``groups`` only).
    """

    def __init__(self, grid: Sequence[float] = tuple(np.round(np.arange(-4.0, 8.01, 0.25), 2)), cv: int = 3) -> None:
        self.grid = grid
        self.cv = cv

    @staticmethod
    def _matrix(scores: Sequence[Mapping[VerdictLabel, float]]) -> np.ndarray:
        if not len(scores):
            raise ValueError("No label scores to calibrate on.")
        return np.asarray([[float(s[k]) for k in _ORDER] for s in scores], dtype=np.float64)

    def fit(
        self,
        scores: Sequence[Mapping[VerdictLabel, float]],
        gold: Sequence[VerdictLabel | str],
        groups: Sequence[str] | None = None,
    ) -> LabelBiasCalibrator:
        """Grid-search the offsets; ``scores`` are :attr:`LabelScores.logprobs` mappings, ``gold`` their labels.

        ``groups`` (e.g. the claim of each row): keep the offsets only if they beat no offsets
        out of fold (grouped ``cv``-fold cross-validation, macro-F1).
        """
        x = self._matrix(scores)
        if len(gold) != len(x):
            raise ValueError(f"{len(x)} score rows but {len(gold)} gold labels.")
        y = np.asarray([_ORDER.index(_label(g)) for g in gold])
        b_ref, b_nei = self._search(x, y)
        if groups is not None:
            self.cv_scores_ = self._cross_validate(x, y, np.asarray(groups))
            if self.cv_scores_["offsets"] <= self.cv_scores_["none"]:
                b_ref = b_nei = 0.0
        pred = np.argmax(x + np.array([0.0, b_ref, b_nei]), axis=1)
        self.bias_ = {
            VerdictLabel.SUPPORTED: 0.0,
            VerdictLabel.REFUTED: float(b_ref),
            VerdictLabel.NOT_ENOUGH_INFO: float(b_nei),
        }
        self.score_, self.accuracy_ = _macro_f1(y, pred), float(np.mean(pred == y))
        return self

    def _search(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """The grid's best ``(REFUTED, NOT_ENOUGH_INFO)`` offsets on rows ``x`` (shape ``(n, 3)``), labels ``y``."""
        best: tuple[tuple[float, float, float], float, float] | None = None
        grid = np.asarray(self.grid, dtype=np.float64)
        for b_ref in grid:
            for b_nei in grid:
                pred = np.argmax(x + np.array([0.0, b_ref, b_nei]), axis=1)
                key = (_macro_f1(y, pred), float(np.mean(pred == y)), -(abs(b_ref) + abs(b_nei)))
                if best is None or key > best[0]:
                    best = (key, float(b_ref), float(b_nei))
        assert best is not None
        return best[1], best[2]

    def _cross_validate(self, x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> dict[str, float]:
        """Out-of-fold macro-F1 of the searched offsets and of no offsets (folds never split a group)."""
        from sklearn.model_selection import GroupKFold

        folds = min(self.cv, len(set(groups.tolist())))
        if folds < 2:
            raise ValueError("Cross-validating the offsets needs rows of at least 2 groups.")
        pred = np.empty(len(y), dtype=np.int64)
        for train, test in GroupKFold(folds).split(x, y, groups):
            b_ref, b_nei = self._search(x[train], y[train])
            pred[test] = np.argmax(x[test] + np.array([0.0, b_ref, b_nei]), axis=1)
        return {"offsets": _macro_f1(y, pred), "none": _macro_f1(y, np.argmax(x, axis=1))}

    def predict(self, scores: Sequence[Mapping[VerdictLabel, float]]) -> list[VerdictLabel]:
        """The label with the highest biased log-likelihood, per row."""
        if not hasattr(self, "bias_"):
            raise RuntimeError("LabelBiasCalibrator is not fitted; call fit() first.")
        x = self._matrix(scores) + np.array([self.bias_[k] for k in _ORDER])
        return [_ORDER[i] for i in np.argmax(x, axis=1)]


def _label(value: VerdictLabel | str) -> VerdictLabel:
    return value if isinstance(value, VerdictLabel) else VerdictLabel.from_fever(value)
