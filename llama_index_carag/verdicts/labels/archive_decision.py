"""The archive decision: a label decision fitted on the archive's own checked claims, with the LLM's scores.

A fact-check desk's archive has verdicts.  :class:`ArchiveDecision` fits a model of the label on the
archive's labelled claims, from features the claim check has without another LLM call
(:mod:`~llama_index_carag.verdicts.labels.archive_features`: claim–passage cosines, refutation cues,
the claim's embedding), and at check time combines it with the LLM's whole-evidence label scores, the
archive's label lean divided out (the **label-free archive prior**,
:class:`~llama_index_carag.verdicts.labels.domain_prior.DomainLabelPrior`).  So the LLM is called on
the archive only to measure that lean (a few dozen claims), not on every labelled claim.

**Declared before any report number** (this docstring and the constants below were written first):

* Model family: class-balanced multinomial logistic regression with L2 on standardised features,
  one candidate per regularisation strength in ``Cs`` (default :data:`CANDIDATE_CS` = 0.001, 0.01, 0.1, 1).
* Selection: stratified k-fold cross-validation on the labelled archive claims, ``k = min(max_folds,
  smallest label count)`` (``max_folds`` 5), shuffled with ``random_state``; the score is the balanced
  accuracy (mean per-label recall) of the pooled out-of-fold predictions.
* Choice: the candidate with the best score (ties: the smaller ``C``), kept if that score beats chance
  (1/3) by at least ``min_gain`` (:data:`MIN_GAIN` = 0.05); otherwise no model (``"no_gain"``).
* Minimum: at least ``min_claims`` (:data:`MIN_CLAIMS` = 24) labelled claims and ``min_per_label``
  (:data:`MIN_PER_LABEL` = 6) of each label, else no model (``"too_few"``).
* Combination at check time (a product of experts, no weight fitted): label log-probability = the model's
  log-probability + the LLM's log-probability with the lean divided out; the arg-max is the label.
  Without a model it is the prior alone; without LLM scores (``joint=None``) the model alone.

Fitted state, JSON-safe through :meth:`ArchiveDecision.get_state` / :meth:`ArchiveDecision.from_state`:
the choice, each candidate's CV score, the gain over chance, the label counts, the lean and the
logistic's scaler and weights.  :meth:`ArchiveDecision.reason` is the verdict's one-line reason.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from llama_index_carag.verdicts.labels.stance import STANCE_ORDER
from llama_index_carag.verdicts.types import VerdictLabel

logger = logging.getLogger(__name__)

__all__ = [
    "ArchiveDecision",
    "CANDIDATE_CS",
    "MIN_CLAIMS",
    "MIN_GAIN",
    "MIN_PER_LABEL",
    "NO_MODEL",
    "balanced_accuracy",
    "joint_matrix",
    "llm_log_proba",
]

#: Regularisation strengths of the declared candidates (inverse L2 weight, scikit-learn's ``C``).
CANDIDATE_CS = (0.001, 0.01, 0.1, 1.0)
#: Fewest labelled archive claims, in all and per label, to fit a model.
MIN_CLAIMS, MIN_PER_LABEL = 24, 6
#: How far above chance (1/3) the best candidate's out-of-fold balanced accuracy must be to be kept.
MIN_GAIN = 0.05
#: The choice when no model is kept: the LLM's scores with the lean divided out decide alone.
NO_MODEL = "prior"
_FORMAT = "carag-archive-decision/2"
_CLASSES = tuple(k.value for k in STANCE_ORDER)


def balanced_accuracy(gold: Sequence[str] | np.ndarray, pred: Sequence[str] | np.ndarray) -> float:
    """Mean recall over the labels present in ``gold`` (the declared CV score)."""
    gold_a, pred_a = np.asarray(gold), np.asarray(pred)
    return float(np.mean([np.mean(pred_a[gold_a == c] == c) for c in np.unique(gold_a)]))


def joint_matrix(joints: Sequence[Mapping[Any, float]]) -> np.ndarray:
    """Whole-evidence label log-likelihoods (``{label: value}`` each) as an ``(n, 3)`` array in label order."""
    rows = []
    for j in joints:
        d = {VerdictLabel.from_fever(str(getattr(k, "value", k))): float(v) for k, v in j.items()}
        rows.append([d[k] for k in STANCE_ORDER])
    return np.asarray(rows, dtype=float).reshape(len(rows), 3)


def llm_log_proba(joint: Any, lean: Mapping[Any, float] | None = None) -> np.ndarray:
    """The LLM's label log-probabilities, shape ``(n, 3)``, with the archive's label ``lean`` divided out
    (``None``: nothing divided out — the plain arg-max's ranking)."""
    j = np.asarray(joint, dtype=float)
    if j.ndim != 2 or j.shape[1] != 3 or not np.all(np.isfinite(j)):
        raise ValueError(f"joint must be finite label log-likelihoods of shape (n, 3); got {j.shape}.")
    if lean is None:
        return _log_softmax(j)
    by = {VerdictLabel.from_fever(str(getattr(k, "value", k))): float(v) for k, v in lean.items()}
    if set(by) != set(STANCE_ORDER) or any(v <= 0 for v in by.values()):
        raise ValueError(f"lean needs a positive probability for each label; got {dict(lean)!r}.")
    p = np.array([by[k] for k in STANCE_ORDER])
    return _log_softmax(j - np.log(p / p.sum()))


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _as_labels(y: Sequence[Any]) -> np.ndarray:
    return np.array([VerdictLabel.from_fever(str(getattr(v, "value", v))).value for v in y])


class ArchiveDecision(ClassifierMixin, BaseEstimator):
    """A label decision fitted on one archive's labelled claims, combined with the LLM's lean-free scores.

    Args:
        Cs: the declared candidates' regularisation strengths.
        min_claims: fewest labelled claims to fit a model.
        min_per_label: fewest claims of each label to fit a model.
        min_gain: how far above chance the best candidate's CV balanced accuracy must be to be kept.
        max_folds: at most this many CV folds (fewer when a label has fewer claims).
        random_state: seed of the fold shuffle.

    ``X``: rows of :func:`~llama_index_carag.verdicts.labels.archive_features.archive_features`; ``y``:
    labels (``VerdictLabel``, full names or T/F/N).  Predictions are full label names.

    Fitted attributes: ``classes_``, ``choice_`` (:data:`NO_MODEL` or ``"C=…"``), ``cv_scores_`` (candidate
    -> out-of-fold balanced accuracy; empty below the minimum), ``cv_gain_`` (best score minus 1/3; ``None``
    below the minimum), ``fallback_`` (``None``, ``"too_few"`` or ``"no_gain"``), ``n_splits_``,
    ``n_labelled_``, ``label_counts_``, ``scaler_mean_``/``scaler_scale_``/
    ``coef_``/``intercept_`` (``None`` without a model), ``n_features_in_``, ``feature_names_``.
    """

    _parameter_constraints: dict = {
        "Cs": ["array-like"],
        "min_claims": [Interval(Integral, 0, None, closed="left")],
        "min_per_label": [Interval(Integral, 2, None, closed="left")],
        "min_gain": [Interval(Real, 0, 1, closed="both")],
        "max_folds": [Interval(Integral, 2, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        Cs: Sequence[float] = CANDIDATE_CS,
        *,
        min_claims: int = MIN_CLAIMS,
        min_per_label: int = MIN_PER_LABEL,
        min_gain: float = MIN_GAIN,
        max_folds: int = 5,
        random_state: int | None = 0,
    ) -> None:
        self.Cs = Cs
        self.min_claims = min_claims
        self.min_per_label = min_per_label
        self.min_gain = min_gain
        self.max_folds = max_folds
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    def _checked(self, X: Any, y: Any | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        x = np.asarray(X, dtype=float)
        if x.ndim != 2 or x.shape[1] < 1 or not np.all(np.isfinite(x)):
            raise ValueError(f"X must be a finite 2-D array with at least one column; got shape {x.shape}.")
        labels = None if y is None else _as_labels(y)
        if labels is not None and len(labels) != len(x):
            raise ValueError(f"X has {len(x)} rows but y has {len(labels)} labels.")
        if any(not isinstance(c, Real) or isinstance(c, bool) or c <= 0 for c in self.Cs) or not len(self.Cs):
            raise ValueError(f"Cs must be positive numbers; got {self.Cs!r}.")
        return x, labels

    def fit(self, X: Any, y: Any, feature_names: Sequence[str] | None = None) -> ArchiveDecision:
        """Fit on the labelled archive claims ``X``, ``y`` (see the module docstring for the declared rule)."""
        self._validate_params()
        x, labels = self._checked(X, y)
        assert labels is not None
        self.classes_ = np.array(_CLASSES)
        self.n_features_in_ = x.shape[1]
        self.feature_names_ = None if feature_names is None else [str(n) for n in feature_names]
        if self.feature_names_ is not None and len(self.feature_names_) != x.shape[1]:
            raise ValueError(f"{len(self.feature_names_)} feature names for {x.shape[1]} columns.")
        counts = Counter(labels.tolist())
        self.label_counts_ = {c: int(counts.get(c, 0)) for c in _CLASSES}
        self.n_labelled_ = len(labels)
        self.scaler_mean_: np.ndarray | None = None
        self.scaler_scale_: np.ndarray | None = None
        self.coef_: np.ndarray | None = None
        self.intercept_: np.ndarray | None = None
        self.cv_scores_: dict[str, float] = {}
        self.cv_gain_: float | None = None
        self.n_splits_ = 0
        if self.n_labelled_ < self.min_claims or min(self.label_counts_.values()) < self.min_per_label:
            self.choice_, self.fallback_ = NO_MODEL, "too_few"  # type: str, str | None
            logger.info("archive decision: no model (%d labelled claims: %s)", self.n_labelled_, self.label_counts_)
            return self
        self._cross_validate(x, labels)
        best = max(self.cv_scores_, key=lambda n: (self.cv_scores_[n], -float(n[2:])))
        self.cv_gain_ = self.cv_scores_[best] - 1 / 3
        if self.cv_gain_ >= self.min_gain:
            self.choice_, self.fallback_ = best, None
            self._fit_logistic(x, labels, float(best[2:]))
        else:
            self.choice_, self.fallback_ = NO_MODEL, "no_gain"
        logger.info("archive decision: %s", self.reason())
        return self

    def _cross_validate(self, x: np.ndarray, labels: np.ndarray) -> None:
        """Set ``n_splits_`` and ``cv_scores_`` (pooled out-of-fold balanced accuracy per candidate)."""
        from sklearn.model_selection import StratifiedKFold

        self.n_splits_ = int(min(self.max_folds, min(self.label_counts_.values())))
        folds = StratifiedKFold(self.n_splits_, shuffle=True, random_state=self.random_state)
        names = [f"C={float(c):g}" for c in self.Cs]
        oof = {n: np.empty(len(labels), dtype=object) for n in names}
        for train, test in folds.split(x, labels):
            for name, c in zip(names, self.Cs):
                oof[name][test] = _logistic(float(c)).fit(x[train], labels[train]).predict(x[test])
        self.cv_scores_ = {n: balanced_accuracy(labels, oof[n]) for n in names}

    def _fit_logistic(self, x: np.ndarray, labels: np.ndarray, c: float) -> None:
        model = _logistic(c).fit(x, labels)
        scaler, logistic = model[0], model[-1]
        order = [list(logistic.classes_).index(k) for k in _CLASSES]
        self.scaler_mean_, self.scaler_scale_ = scaler.mean_.copy(), scaler.scale_.copy()
        self.coef_, self.intercept_ = logistic.coef_[order].copy(), logistic.intercept_[order].copy()

    # ------------------------------------------------------------------ predicting
    @property
    def has_model(self) -> bool:
        """Whether a fitted model is kept (else the LLM's lean-free scores decide alone)."""
        check_is_fitted(self, "choice_")
        return self.coef_ is not None

    def model_log_proba(self, X: Any) -> np.ndarray:
        """The model's label log-probabilities, shape ``(n, 3)`` (uniform without a model)."""
        check_is_fitted(self, "choice_")
        x, _ = self._checked(X)
        if x.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {x.shape[1]} features; this decision was fitted on {self.n_features_in_}.")
        if self.coef_ is None or self.intercept_ is None:
            return np.full((len(x), 3), -np.log(3.0))
        z = (x - self.scaler_mean_) / self.scaler_scale_
        return _log_softmax(z @ self.coef_.T + self.intercept_)

    def predict_proba(self, X: Any, joint: Any | None = None, lean: Mapping[Any, float] | None = None) -> np.ndarray:
        """Label probabilities, shape ``(n, 3)``, columns in ``classes_`` order (SUPPORTED, REFUTED, NEI).

        ``joint``: the LLM's whole-evidence label log-likelihoods, ``(n, 3)`` (:func:`joint_matrix`), or ``None``
        (the model alone); ``lean``: the archive's label lean for that LLM (``DomainLabelPrior.joint_``),
        divided out of ``joint`` (:func:`llm_log_proba`).
        """
        z = self.model_log_proba(X)
        if joint is not None:
            llm = llm_log_proba(joint, lean)
            if len(llm) != len(z):
                raise ValueError(f"X has {len(z)} rows but joint has {len(llm)}.")
            z = z + llm
        return np.exp(_log_softmax(z))

    def predict(self, X: Any, joint: Any | None = None, lean: Mapping[Any, float] | None = None) -> np.ndarray:
        """The most probable label of each row (full label names); ``joint``, ``lean``: see :meth:`predict_proba`."""
        proba = self.predict_proba(X, joint, lean)
        return self.classes_[proba.argmax(axis=1)]

    def reason(self) -> str:
        """The verdict's one-line reason for this decision."""
        check_is_fitted(self, "choice_")
        n = self.n_labelled_
        if self.fallback_ == "too_few":
            return (
                f"archive prior (the label lean divided out): {n} labelled archive claims, fewer than "
                f"{self.min_claims} or {self.min_per_label} of each label"
            )
        best = max(self.cv_scores_.values())
        if self.fallback_ == "no_gain":
            return (
                f"archive prior (the label lean divided out): a model fitted on {n} labelled claims was near chance "
                f"out of fold (CV balanced accuracy {best:.2f})"
            )
        return (
            f"archive decision fitted on {n} labelled claims ({self.choice_}, CV balanced accuracy "
            f"{self.cv_scores_[self.choice_]:.2f}) with the LLM's scores, the label lean divided out"
        )

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, Any]:
        """Parameters and fitted state as plain JSON types."""
        check_is_fitted(self, "choice_")

        def plain(a: np.ndarray | None) -> Any:
            return None if a is None else np.asarray(a, dtype=float).tolist()

        params = self.get_params()
        params["Cs"] = [float(c) for c in self.Cs]
        fitted = {
            "choice": self.choice_,
            "fallback": self.fallback_,
            "cv_scores": {k: float(v) for k, v in self.cv_scores_.items()},
            "cv_gain": None if self.cv_gain_ is None else float(self.cv_gain_),
            "n_splits": self.n_splits_,
            "n_labelled": self.n_labelled_,
            "label_counts": dict(self.label_counts_),
            "scaler_mean": plain(self.scaler_mean_),
            "scaler_scale": plain(self.scaler_scale_),
            "coef": plain(self.coef_),
            "intercept": plain(self.intercept_),
            "n_features_in": self.n_features_in_,
            "feature_names": self.feature_names_,
        }
        return {"format": _FORMAT, "params": params, "fitted": fitted}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ArchiveDecision:
        """The decision :meth:`get_state` described (raises ``ValueError`` on another format)."""
        if state.get("format") != _FORMAT:
            raise ValueError(f"Not a {_FORMAT} state (format {state.get('format')!r}).")
        params = dict(state["params"])
        params["Cs"] = tuple(params["Cs"])
        decision = cls(**params)
        f = state["fitted"]

        def array(v: Any) -> np.ndarray | None:
            return None if v is None else np.asarray(v, dtype=float)

        decision.classes_ = np.array(_CLASSES)
        decision.choice_, decision.fallback_ = str(f["choice"]), f["fallback"]
        decision.cv_scores_ = {str(k): float(v) for k, v in f["cv_scores"].items()}
        decision.cv_gain_ = None if f["cv_gain"] is None else float(f["cv_gain"])
        decision.n_splits_, decision.n_labelled_ = int(f["n_splits"]), int(f["n_labelled"])
        decision.label_counts_ = {str(k): int(v) for k, v in f["label_counts"].items()}
        decision.scaler_mean_, decision.scaler_scale_ = array(f["scaler_mean"]), array(f["scaler_scale"])
        decision.coef_, decision.intercept_ = array(f["coef"]), array(f["intercept"])
        decision.n_features_in_, decision.feature_names_ = int(f["n_features_in"]), f["feature_names"]
        return decision


def _logistic(c: float) -> Any:
    """One declared candidate: standardised features, class-balanced multinomial logistic regression with L2."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=c, class_weight="balanced", max_iter=3000))
