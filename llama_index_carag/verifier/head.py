"""A claim-level head on the verifier's passage probabilities, fitted on an archive's labelled claims.

The shipped rule (:func:`~llama_index_carag.verifier.model.decide_label`) weighs the strongest support against
the strongest refutation with one threshold.  On a new domain the verifier's probabilities lean (it reads a
topical passage that says something else as a refutation), and one threshold cannot move that lean.
:class:`LabelHead` learns the claim's label from a few numbers of its passages' probabilities — for each label
its largest and its mean probability over the passages (:func:`claim_features`) — with a class-balanced
multinomial logistic regression, its strength chosen by cross-validation on the archive.  It is one of the
candidates ``carag index --calibrate`` compares out of fold (:mod:`~llama_index_carag.verifier.archive`).

The fitted head is six standardised inputs, a ``(3, 6)`` weight matrix and three intercepts: it is stored as
numbers in the verifier's ``verifier.json`` (:meth:`LabelHead.to_dict` / :meth:`LabelHead.from_dict`) and
predicts with numpy alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from llama_index_carag.verdicts.types import LABELS

logger = logging.getLogger(__name__)

#: What :func:`claim_features` returns, in order.
FEATURE_NAMES = tuple(f"{kind}_{label}" for kind in ("max", "mean") for label in LABELS)
_NO_PASSAGE = np.array([0.0, 0.0, 1.0])


def claim_features(probabilities: np.ndarray) -> np.ndarray:
    """The head's inputs for one claim: per label the largest and the mean probability over its passages
    (rows: passages; columns: :data:`~llama_index_carag.verifier.pairs.LABELS`).  A claim without passages reads
    as one passage that is surely NOT_ENOUGH_INFO."""
    probs = np.asarray(probabilities, dtype=np.float64).reshape(-1, len(LABELS))
    if not len(probs):
        probs = _NO_PASSAGE[None, :]
    return np.concatenate([probs.max(axis=0), probs.mean(axis=0)])


class LabelHead(ClassifierMixin, BaseEstimator):
    """Class-balanced multinomial logistic regression from :func:`claim_features` to the claim's label.

    Args:
        Cs: inverse regularisation strengths tried; the one with the best cross-validated macro-F1 is kept.
        cv: folds of that choice (stratified).
        random_state: seed of the folds.

    ``fit(X, y)`` takes ``X`` as a sequence of per-claim probability matrices (or an ``(n, 6)`` array of their
    features) and ``y`` as label names.  Fitted: ``mean_``, ``scale_``, ``coef_``, ``intercept_``, ``C_``,
    ``classes_``.
    """

    _parameter_constraints: dict[str, list[Any]] = {
        "Cs": ["array-like"],
        "cv": [Interval(Integral, 2, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, Cs: Sequence[float] = (0.01, 0.1, 1.0, 10.0), cv: int = 5, random_state: int = 0) -> None:
        self.Cs = Cs
        self.cv = cv
        self.random_state = random_state

    @staticmethod
    def _inputs(X: Any) -> np.ndarray:
        if isinstance(X, np.ndarray) and X.ndim == 2 and X.shape[1] == len(FEATURE_NAMES):
            return X.astype(np.float64)
        return np.vstack([claim_features(p) for p in X]) if len(X) else np.zeros((0, len(FEATURE_NAMES)))

    def fit(self, X: Any, y: Sequence[str]) -> LabelHead:
        """Fit on per-claim probabilities ``X`` and labels ``y`` (every label of :data:`LABELS` present)."""
        from sklearn.linear_model import LogisticRegressionCV
        from sklearn.model_selection import StratifiedKFold

        self._validate_params()
        if not all(isinstance(c, Real) and c > 0 for c in self.Cs):
            raise ValueError(f"Cs must be positive numbers; got {self.Cs!r}.")
        features = self._inputs(X)
        labels = np.asarray([str(v) for v in y])
        if len(features) != len(labels):
            raise ValueError(f"X has {len(features)} claims, y {len(labels)} labels.")
        missing = sorted(set(LABELS) - set(labels))
        if missing or set(labels) - set(LABELS):
            raise ValueError(f"y must hold each of {LABELS} and nothing else; missing {missing}.")
        self.mean_ = features.mean(axis=0)
        self.scale_ = np.where(features.std(axis=0) > 1e-9, features.std(axis=0), 1.0)
        folds = StratifiedKFold(
            min(self.cv, int(min(np.unique(labels, return_counts=True)[1]))),
            shuffle=True,
            random_state=self.random_state,
        )
        model = LogisticRegressionCV(
            Cs=list(self.Cs),
            cv=folds,
            scoring="f1_macro",
            class_weight="balanced",
            l1_ratios=(0.0,),
            use_legacy_attributes=False,
            max_iter=2000,
        ).fit((features - self.mean_) / self.scale_, labels)
        order = [list(model.classes_).index(k) for k in LABELS]
        self.classes_ = np.asarray(LABELS)
        self.coef_ = model.coef_[order]
        self.intercept_ = model.intercept_[order]
        self.C_ = float(model.C_)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """P(label) per claim, columns in :data:`LABELS` order."""
        check_is_fitted(self, "coef_")
        z = ((self._inputs(X) - self.mean_) / self.scale_) @ self.coef_.T + self.intercept_
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    def predict(self, X: Any) -> np.ndarray:
        """The most probable label per claim."""
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(axis=1)]

    def to_dict(self) -> dict[str, Any]:
        """The fitted head as plain numbers (what ``verifier.json`` stores)."""
        check_is_fitted(self, "coef_")
        return {
            "features": list(FEATURE_NAMES),
            "labels": list(LABELS),
            "C": self.C_,
            "mean": [round(float(v), 8) for v in self.mean_],
            "scale": [round(float(v), 8) for v in self.scale_],
            "coef": [[round(float(v), 8) for v in row] for row in self.coef_],
            "intercept": [round(float(v), 8) for v in self.intercept_],
        }

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> LabelHead:
        """A fitted head from :meth:`to_dict`'s numbers."""
        if list(state.get("features", [])) != list(FEATURE_NAMES) or list(state.get("labels", [])) != list(LABELS):
            raise ValueError(
                f"the stored head reads {state.get('features')} for {state.get('labels')}; "
                f"this version reads {list(FEATURE_NAMES)} for {list(LABELS)}."
            )
        head = cls()
        head.classes_ = np.asarray(LABELS)
        head.C_ = float(state["C"])
        head.mean_ = np.asarray(state["mean"], dtype=np.float64)
        head.scale_ = np.asarray(state["scale"], dtype=np.float64)
        head.coef_ = np.asarray(state["coef"], dtype=np.float64).reshape(len(LABELS), len(FEATURE_NAMES))
        head.intercept_ = np.asarray(state["intercept"], dtype=np.float64).reshape(len(LABELS))
        return head
