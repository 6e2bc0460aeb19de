"""The archive decision: a label decision fitted on the archive's own checked claims, or its label-free prior.

A fact-check desk's archive has verdicts.  :class:`ArchiveDecision` fits the label decision on the
archive's labelled claims (features: :mod:`~llama_index_carag.verdicts.labels.archive_features`,
whose first three columns are the whole-evidence label log-probabilities) and keeps it only when it
beats, out of fold, the **label-free archive prior** — the arg-max with the archive's label lean
divided out (:class:`~llama_index_carag.verdicts.labels.domain_prior.DomainLabelPrior`'s decision).

**Declared before any report number** (this docstring and the constants below were written first):

* Model family: class-balanced multinomial logistic regression with L2 on standardised features,
  one candidate per regularisation strength in ``Cs`` (default :data:`CANDIDATE_CS` = 0.01, 0.1, 1).
* Selection: stratified k-fold cross-validation on the labelled archive claims, ``k = min(max_folds,
  smallest label count)`` (``max_folds`` 5), shuffled with ``random_state``; the score is the balanced
  accuracy (mean per-label recall) of the pooled out-of-fold predictions.  The prior is scored on the same
  folds, its lean estimated on each training fold without reading labels.
* Choice: the candidate with the best score (ties: the smaller ``C``) if it beats the prior's score;
  otherwise the prior ("shrinkage" to the label-free decision: all the way, never half way).
* Minimum: at least ``min_claims`` (24) labelled claims and ``min_per_label`` (6) of each label, else the
  prior without cross-validation.

Fitted state, JSON-safe through :meth:`ArchiveDecision.get_state` / :meth:`ArchiveDecision.from_state`:
the choice, each candidate's and the prior's CV score, the gain, the label counts, the prior and the
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

__all__ = ["ArchiveDecision", "CANDIDATE_CS", "MIN_CLAIMS", "MIN_PER_LABEL", "PRIOR", "balanced_accuracy"]

#: Regularisation strengths of the declared candidates (inverse L2 weight, scikit-learn's ``C``).
CANDIDATE_CS = (0.01, 0.1, 1.0)
#: Fewest labelled archive claims, in all and per label, to fit anything but the prior.
MIN_CLAIMS, MIN_PER_LABEL = 24, 6
#: Name of the label-free fallback among the candidates.
PRIOR = "prior"
_FORMAT = "carag-archive-decision/1"
_CLASSES = tuple(k.value for k in STANCE_ORDER)


def balanced_accuracy(gold: Sequence[str] | np.ndarray, pred: Sequence[str] | np.ndarray) -> float:
    """Mean recall over the labels present in ``gold`` (the declared CV score)."""
    gold_a, pred_a = np.asarray(gold), np.asarray(pred)
    return float(np.mean([np.mean(pred_a[gold_a == c] == c) for c in np.unique(gold_a)]))


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _label_free_prior(x: np.ndarray) -> np.ndarray:
    """Mean whole-evidence label probabilities over the rows of ``x`` (its first three columns), labels unread."""
    probs = _softmax(x[:, :3])
    return probs.mean(axis=0)


def _prior_proba(x: np.ndarray, prior: np.ndarray) -> np.ndarray:
    return _softmax(x[:, :3] - np.log(np.maximum(prior, 1e-300)))


def _candidate_name(c: float) -> str:
    return f"C={c:g}"


def _as_labels(y: Sequence[Any]) -> np.ndarray:
    return np.array([VerdictLabel.from_fever(str(getattr(v, "value", v))).value for v in y])


class ArchiveDecision(ClassifierMixin, BaseEstimator):
    """A label decision fitted on one archive's labelled claims, or that archive's label-free prior.

    Args:
        Cs: the declared candidates' regularisation strengths.
        min_claims: fewest labelled claims to fit a candidate (else the prior).
        min_per_label: fewest claims of each label to fit a candidate (else the prior).
        max_folds: at most this many CV folds (fewer when a label has fewer claims).
        prior: the archive's label lean ``{label: probability}`` (e.g. ``DomainLabelPrior.joint_``,
            measured on more claims than are labelled); ``None``: estimated from ``X`` without labels.
        random_state: seed of the fold shuffle.

    ``X``: rows of :func:`~llama_index_carag.verdicts.labels.archive_features.archive_features`; its first
    three columns are the whole-evidence log-probabilities of SUPPORTED, REFUTED, NOT_ENOUGH_INFO.
    ``y``: labels (``VerdictLabel``, full names or T/F/N).  Predictions are full label names.

    Fitted attributes: ``classes_``, ``choice_`` (:data:`PRIOR` or ``"C=…"``), ``cv_scores_`` (candidate ->
    out-of-fold balanced accuracy; empty below the minimum), ``prior_score_``, ``cv_gain_`` (best candidate's
    score minus the prior's; ``None`` below the minimum), ``fallback_`` (``None``, ``"too_few"`` or
    ``"no_gain"``), ``n_splits_``, ``n_labelled_``, ``label_counts_``, ``prior_`` (3 probabilities),
    ``scaler_mean_``/``scaler_scale_``/``coef_``/``intercept_`` (``None`` under the prior), ``n_features_in_``,
    ``feature_names_``.
    """

    _parameter_constraints: dict = {
        "Cs": ["array-like"],
        "min_claims": [Interval(Integral, 0, None, closed="left")],
        "min_per_label": [Interval(Integral, 2, None, closed="left")],
        "max_folds": [Interval(Integral, 2, None, closed="left")],
        "prior": [dict, None],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        Cs: Sequence[float] = CANDIDATE_CS,
        *,
        min_claims: int = MIN_CLAIMS,
        min_per_label: int = MIN_PER_LABEL,
        max_folds: int = 5,
        prior: Mapping[Any, float] | None = None,
        random_state: int | None = 0,
    ) -> None:
        self.Cs = Cs
        self.min_claims = min_claims
        self.min_per_label = min_per_label
        self.max_folds = max_folds
        self.prior = prior
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    def _checked(self, X: Any, y: Any | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        x = np.asarray(X, dtype=float)
        if x.ndim != 2 or x.shape[1] < 3 or not np.all(np.isfinite(x)):
            raise ValueError(f"X must be a finite 2-D array with at least 3 columns; got shape {x.shape}.")
        labels = None if y is None else _as_labels(y)
        if labels is not None and len(labels) != len(x):
            raise ValueError(f"X has {len(x)} rows but y has {len(labels)} labels.")
        if any(not isinstance(c, Real) or isinstance(c, bool) or c <= 0 for c in self.Cs) or not len(self.Cs):
            raise ValueError(f"Cs must be positive numbers; got {self.Cs!r}.")
        return x, labels

    def _given_prior(self) -> np.ndarray | None:
        if self.prior is None:
            return None
        lean = {VerdictLabel.from_fever(str(getattr(k, "value", k))): float(v) for k, v in self.prior.items()}
        if set(lean) != set(STANCE_ORDER) or any(v <= 0 for v in lean.values()):
            raise ValueError(f"prior needs a positive probability for each label; got {self.prior!r}.")
        p = np.array([lean[k] for k in STANCE_ORDER])
        return p / p.sum()

    def fit(self, X: Any, y: Any, feature_names: Sequence[str] | None = None) -> ArchiveDecision:
        """Fit on the labelled archive claims ``X``, ``y`` (see the module docstring for the declared rule)."""
        self._validate_params()
        x, labels = self._checked(X, y)
        assert labels is not None
        given = self._given_prior()
        self.classes_ = np.array(_CLASSES)
        self.n_features_in_ = x.shape[1]
        self.feature_names_ = None if feature_names is None else [str(n) for n in feature_names]
        if self.feature_names_ is not None and len(self.feature_names_) != x.shape[1]:
            raise ValueError(f"{len(self.feature_names_)} feature names for {x.shape[1]} columns.")
        counts = Counter(labels.tolist())
        self.label_counts_ = {c: int(counts.get(c, 0)) for c in _CLASSES}
        self.n_labelled_ = len(labels)
        self.prior_ = given if given is not None else _label_free_prior(x)
        self.scaler_mean_: np.ndarray | None = None
        self.scaler_scale_: np.ndarray | None = None
        self.coef_: np.ndarray | None = None
        self.intercept_: np.ndarray | None = None
        self.cv_scores_: dict[str, float] = {}
        self.cv_gain_: float | None = None
        self.prior_score_: float | None = None
        self.n_splits_ = 0
        if self.n_labelled_ < self.min_claims or min(self.label_counts_.values()) < self.min_per_label:
            self.choice_, self.fallback_ = PRIOR, "too_few"  # type: str, str | None
            pred = self.classes_[_prior_proba(x, self.prior_).argmax(axis=1)]
            self.prior_score_ = balanced_accuracy(labels, pred) if len(labels) else None
            logger.info("archive decision: the prior (%d labelled claims: %s)", self.n_labelled_, self.label_counts_)
            return self
        self.prior_score_ = prior_score = self._cross_validate(x, labels, given)
        best = max(self.cv_scores_, key=lambda n: (self.cv_scores_[n], -float(n[2:])))
        self.cv_gain_ = self.cv_scores_[best] - prior_score
        if self.cv_gain_ > 0:
            self.choice_, self.fallback_ = best, None
            self._fit_logistic(x, labels, float(best[2:]))
        else:
            self.choice_, self.fallback_ = PRIOR, "no_gain"
        logger.info("archive decision: %s", self.reason())
        return self

    def _cross_validate(self, x: np.ndarray, labels: np.ndarray, given: np.ndarray | None) -> float:
        """Set ``n_splits_`` and ``cv_scores_``; return the prior's out-of-fold score."""
        from sklearn.model_selection import StratifiedKFold

        self.n_splits_ = int(min(self.max_folds, min(self.label_counts_.values())))
        folds = StratifiedKFold(self.n_splits_, shuffle=True, random_state=self.random_state)
        names = [_candidate_name(float(c)) for c in self.Cs]
        oof = {n: np.empty(len(labels), dtype=object) for n in [*names, PRIOR]}
        for train, test in folds.split(x, labels):
            lean = given if given is not None else _label_free_prior(x[train])
            oof[PRIOR][test] = self.classes_[_prior_proba(x[test], lean).argmax(axis=1)]
            for name, c in zip(names, self.Cs):
                oof[name][test] = _logistic(float(c)).fit(x[train], labels[train]).predict(x[test])
        self.cv_scores_ = {n: balanced_accuracy(labels, oof[n]) for n in names}
        return balanced_accuracy(labels, oof[PRIOR])

    def _fit_logistic(self, x: np.ndarray, labels: np.ndarray, c: float) -> None:
        model = _logistic(c).fit(x, labels)
        scaler, logistic = model[0], model[-1]
        order = [list(logistic.classes_).index(k) for k in _CLASSES]
        self.scaler_mean_, self.scaler_scale_ = scaler.mean_.copy(), scaler.scale_.copy()
        self.coef_, self.intercept_ = logistic.coef_[order].copy(), logistic.intercept_[order].copy()

    # ------------------------------------------------------------------ predicting
    def predict_proba(self, X: Any) -> np.ndarray:
        """Label probabilities, shape ``(n, 3)``, columns in ``classes_`` order (SUPPORTED, REFUTED, NEI)."""
        check_is_fitted(self, "choice_")
        x, _ = self._checked(X)
        if x.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {x.shape[1]} features; this decision was fitted on {self.n_features_in_}.")
        if self.choice_ == PRIOR or self.coef_ is None or self.intercept_ is None:
            return _prior_proba(x, self.prior_)
        z = (x - self.scaler_mean_) / self.scaler_scale_
        return _softmax(z @ self.coef_.T + self.intercept_)

    def predict(self, X: Any) -> np.ndarray:
        """The most probable label of each row (full label names)."""
        proba = self.predict_proba(X)
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
                f"archive prior (the label lean divided out): a decision fitted on {n} labelled claims did not beat "
                f"it out of fold (CV balanced accuracy {best:.2f} vs prior {self.prior_score_:.2f})"
            )
        return (
            f"archive decision fitted on {n} labelled claims ({self.choice_}), "
            f"CV balanced accuracy {self.cv_scores_[self.choice_]:.2f} vs prior {self.prior_score_:.2f}"
        )

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, Any]:
        """Parameters and fitted state as plain JSON types."""
        check_is_fitted(self, "choice_")

        def plain(a: np.ndarray | None) -> Any:
            return None if a is None else np.asarray(a, dtype=float).tolist()

        params = self.get_params()
        params["Cs"] = [float(c) for c in self.Cs]
        params["prior"] = (
            None if self.prior is None else {str(getattr(k, "value", k)): float(v) for k, v in self.prior.items()}
        )
        fitted = {
            "choice": self.choice_,
            "fallback": self.fallback_,
            "cv_scores": {k: float(v) for k, v in self.cv_scores_.items()},
            "prior_score": None if self.prior_score_ is None else float(self.prior_score_),
            "cv_gain": None if self.cv_gain_ is None else float(self.cv_gain_),
            "n_splits": self.n_splits_,
            "n_labelled": self.n_labelled_,
            "label_counts": dict(self.label_counts_),
            "prior": plain(self.prior_),
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
        decision.prior_score_ = None if f["prior_score"] is None else float(f["prior_score"])
        decision.cv_gain_ = None if f["cv_gain"] is None else float(f["cv_gain"])
        decision.n_splits_, decision.n_labelled_ = int(f["n_splits"]), int(f["n_labelled"])
        decision.label_counts_ = {str(k): int(v) for k, v in f["label_counts"].items()}
        decision.prior_ = np.asarray(f["prior"], dtype=float)
        decision.scaler_mean_, decision.scaler_scale_ = array(f["scaler_mean"]), array(f["scaler_scale"])
        decision.coef_, decision.intercept_ = array(f["coef"]), array(f["intercept"])
        decision.n_features_in_, decision.feature_names_ = int(f["n_features_in"]), f["feature_names"]
        return decision


def _logistic(c: float) -> Any:
    """One declared candidate: standardised features, class-balanced multinomial logistic regression with L2."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=c, class_weight="balanced", max_iter=2000))
