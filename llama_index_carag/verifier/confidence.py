"""How sure a verdict is: the verifier's score for its label, mapped to P(right) on labelled claims it did not learn from.

The verifier's rule gives each claim's label a raw score (:attr:`~llama_index_carag.verifier.model.VerifierLabel.
score`: the strongest passage's probability of the label, the passages' mean probability, or the archive head's
probability).  A raw score is not the chance of being right: the cross-encoder is over-sure on topical passages.
:class:`LabelConfidence` maps it, per label, to P(the label is right) with a one-input logistic regression (Platt
scaling) fitted on held-out claims: the pool's validation claims for the shipped verifier
(:func:`~llama_index_carag.verifier.training.train_shipped`), the archive's out-of-fold claims for an
archive-fitted one (:mod:`~llama_index_carag.verifier.archive`).  A label with too few held-out claims, or with
one outcome only, takes its shrunk rate of being right, ``(right + 1) / (n + 2)``, whatever its score; a slope that
comes out negative is read the same way (a score that does not rank is no evidence).

The fitted map is two numbers per label, stored in the verifier's ``verifier.json`` (:meth:`LabelConfidence.
to_dict` / :meth:`LabelConfidence.from_dict`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from numbers import Integral
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from llama_index_carag.verdicts.types import LABELS

logger = logging.getLogger(__name__)


class LabelConfidence(BaseEstimator):
    """Per label, P(the label is right | its raw score): Platt scaling fitted on held-out claims.

    Args:
        min_claims: a label needs this many held-out claims (with both outcomes) for a slope; else its shrunk rate.

    ``fit(X, y)``: ``X`` a sequence of ``(label, raw score)``, ``y`` whether each label was right.  Fitted:
    ``coef_`` and ``intercept_`` (label → number; P = 1 / (1 + exp(-(coef * score + intercept)))), ``n_claims_``.
    """

    _parameter_constraints: dict[str, list[Any]] = {"min_claims": [Interval(Integral, 2, None, closed="left")]}

    def __init__(self, min_claims: int = 10) -> None:
        self.min_claims = min_claims

    def fit(self, X: Sequence[tuple[str, float]], y: Sequence[bool]) -> LabelConfidence:
        from sklearn.linear_model import LogisticRegression

        self._validate_params()
        if len(X) != len(y):
            raise ValueError(f"X has {len(X)} labels, y {len(y)} outcomes.")
        unknown = sorted({str(label) for label, _ in X} - set(LABELS))
        if unknown:
            raise ValueError(f"X holds labels {unknown}; expected {list(LABELS)}.")
        self.coef_, self.intercept_, self.n_claims_ = {}, {}, {}
        for label in LABELS:
            rows = [(float(s), bool(r)) for (k, s), r in zip(X, y) if k == label]
            scores = np.array([s for s, _ in rows]).reshape(-1, 1)
            right = np.array([r for _, r in rows], dtype=int)
            self.n_claims_[label] = len(rows)
            slope, intercept = 0.0, float(np.log((right.sum() + 1) / (len(right) - right.sum() + 1)))
            if len(rows) >= self.min_claims and 0 < right.sum() < len(right):
                model = LogisticRegression(C=1e4, max_iter=1000).fit(scores, right)
                if model.coef_[0, 0] > 0:
                    slope, intercept = float(model.coef_[0, 0]), float(model.intercept_[0])
            self.coef_[label], self.intercept_[label] = slope, intercept
        return self

    def predict(self, label: str, score: float) -> float:
        """P(``label`` is right) for a raw ``score``."""
        check_is_fitted(self, "coef_")
        z = self.coef_[label] * float(score) + self.intercept_[label]
        return float(1.0 / (1.0 + np.exp(-z)))

    def to_dict(self) -> dict[str, Any]:
        """The fitted map as plain numbers (what ``verifier.json`` stores)."""
        check_is_fitted(self, "coef_")
        return {
            k: {"coef": round(self.coef_[k], 6), "intercept": round(self.intercept_[k], 6), "claims": self.n_claims_[k]}
            for k in LABELS
        }

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> LabelConfidence:
        """A fitted map from :meth:`to_dict`'s numbers."""
        if sorted(state) != sorted(LABELS):
            raise ValueError(f"the stored confidence map covers {sorted(state)}; expected {list(LABELS)}.")
        fitted = cls()
        fitted.coef_ = {k: float(state[k]["coef"]) for k in LABELS}
        fitted.intercept_ = {k: float(state[k]["intercept"]) for k in LABELS}
        fitted.n_claims_ = {k: int(state[k].get("claims", 0)) for k in LABELS}
        return fitted


def confidence_of(decided: Sequence[Any], gold: Sequence[str]) -> LabelConfidence:
    """A :class:`LabelConfidence` fitted on held-out claims' decisions (each with ``.label`` and its raw
    ``.score``) and their ``gold`` labels."""
    return LabelConfidence().fit([(d.label, d.score) for d in decided], [d.label == g for d, g in zip(decided, gold)])
