"""The domain check: how the verifier reads a corpus, label-free, and the thresholds that keep it honest there.

On a new domain the shipped verifier leans: it reads many topical passages as refutations (REFUTED for most of a
balanced set, about a quarter of true claims called false).  :class:`DomainThresholds` measures that lean on the
corpus's own claims without their labels: each reference claim is read with the passages the retriever gives it
(what a new claim will get), and its strongest support ``s`` and strongest refutation ``r`` are collected.
A label then needs more than the verifier's own threshold: it needs to be among the strongest
:attr:`~DomainThresholds.share` of that label's readings on this corpus, so that at most that share of the
corpus's claims would get it.  What falls below both is NOT_ENOUGH_INFO, with the thresholds in its reason.

The rule (``share`` 0.25, the verifier's own threshold as a floor) was fixed on the tuning data (FactVer's tuning
half, SciFact's train claims, read with the evidence the retriever gives them) before any report figure: it
was the largest share of 0.25, 1/3, 0.4 that kept claims called the opposite of the truth (S↔R) at or under
10 % of a balanced set in all four tuning cells.  docs/VERDICTS.md has the figures.

:func:`fit_domain_verifier` writes the result as a verifier folder on the shipped weights (two numbers in its
``verifier.json``); ``carag index`` runs it for an index whose corpus has claims.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval, validate_params
from sklearn.utils.validation import check_is_fitted

from llama_index_carag.verdicts.types import LABELS
from llama_index_carag.verifier.model import ClaimVerifier

logger = logging.getLogger(__name__)

#: The share of a corpus's claims each of SUPPORTED and REFUTED may take at most (module docstring).
SHARE = 0.25
#: Fewer reference claims than this: no domain check (the verifier's own threshold decides).
MIN_CLAIMS = 20
#: At most this many reference claims are read (a seeded sample): the check's cost stays bounded.
MAX_CLAIMS = 200


class DomainThresholds(BaseEstimator):
    """The SUPPORTED and REFUTED thresholds of a corpus, from its claims' passage probabilities (no labels).

    Args:
        share: each label's threshold is the ``1 - share`` quantile of its strongest reading over the reference
            claims, so at most about ``share`` of them get it.
        floor: no threshold below this (the verifier's own threshold).

    ``fit(X)`` takes ``X`` as a sequence of per-claim probability matrices (rows: passages; columns:
    SUPPORTED, REFUTED, NOT_ENOUGH_INFO).  Fitted: ``supported_``, ``refuted_`` (the thresholds),
    ``n_claims_`` and ``lean_`` (the share of reference claims the floor alone would call SUPPORTED, REFUTED,
    NOT_ENOUGH_INFO: how the verifier reads this corpus out of the box).
    """

    _parameter_constraints: dict = {
        "share": [Interval(Real, 0.0, 1.0, closed="neither")],
        "floor": [Interval(Real, 0.0, 1.0, closed="both")],
    }

    def __init__(self, share: float = SHARE, floor: float = 0.5) -> None:
        self.share = share
        self.floor = floor

    def fit(self, X: Sequence[Any], y: None = None) -> DomainThresholds:
        self._validate_params()
        strongest = np.array([_strongest(p) for p in X], dtype=np.float64).reshape(-1, 2)
        if not len(strongest):
            raise ValueError("DomainThresholds needs at least one reference claim.")
        self.supported_, self.refuted_ = (
            max(self.floor, float(np.quantile(strongest[:, k], 1.0 - self.share))) for k in range(2)
        )
        from llama_index_carag.verifier.model import decide_label

        labels = [decide_label(p, self.floor).label for p in X]
        self.lean_ = {k: round(labels.count(k) / len(labels), 4) for k in LABELS}
        self.n_claims_ = len(strongest)
        return self

    def record(self) -> dict[str, Any]:
        """What the check fitted and read, for the verifier's record."""
        check_is_fitted(self, "refuted_")
        return {"share": self.share, "floor": self.floor, "claims": self.n_claims_, "lean": self.lean_}


def _strongest(probabilities: Any) -> tuple[float, float]:
    probs = np.asarray(probabilities, dtype=np.float64).reshape(-1, len(LABELS))
    return (float(probs[:, 0].max()), float(probs[:, 1].max())) if len(probs) else (0.0, 0.0)


def reference_sample(n: int, max_claims: int = MAX_CLAIMS, seed: int = 0) -> list[int]:
    """The positions of the reference claims among ``n`` corpus claims (a seeded sample of at most ``max_claims``)."""
    return sorted(random.Random(seed).sample(range(n), min(max_claims, n)))


@validate_params(
    {"claims": ["array-like"], "out_dir": [str, Path], "max_claims": [Interval(Integral, 1, None, closed="left")]},
    prefer_skip_nested_validation=True,
)
def fit_domain_verifier(
    claims: Sequence[tuple[str, Sequence[str]]],
    out_dir: str | Path,
    *,
    verifier: ClaimVerifier | None = None,
    max_claims: int = MAX_CLAIMS,
    seed: int = 0,
) -> dict[str, Any] | None:
    """Read ``claims`` (each a claim's text with the passages the retriever gives it) with ``verifier`` (default:
    the shipped one), fit :class:`DomainThresholds` and write a verifier folder on the same weights to
    ``out_dir``.  Returns the check's record, or ``None`` (nothing written) below :data:`MIN_CLAIMS` claims."""
    from llama_index_carag.verifier.model import shipped_verifier

    started = time.perf_counter()
    if len(claims) < MIN_CLAIMS:
        logger.info("domain check skipped: %d claims (needs %d)", len(claims), MIN_CLAIMS)
        return None
    base = verifier if verifier is not None else shipped_verifier()
    if not base.shipped_weights:
        raise ValueError("fit_domain_verifier writes thresholds only: pass the shipped verifier (or none).")
    adapted = out_of_box_verifier(claims, verifier=base, max_claims=max_claims, seed=seed)
    record = adapted.record["domain_check"] | {"seconds": round(time.perf_counter() - started, 1)}
    adapted.save(out_dir, name_shipped=True, domain_check=record)
    return record | {"supported": adapted.threshold, "refuted": adapted.refuted_threshold}


def out_of_box_verifier(
    claims: Sequence[tuple[str, Sequence[str]]],
    *,
    verifier: ClaimVerifier | None = None,
    max_claims: int = MAX_CLAIMS,
    seed: int = 0,
) -> ClaimVerifier:
    """The verifier an index gets without its labels: ``claims`` (each a claim's text with the passages the
    retriever gives it; a seeded sample of at most ``max_claims``) read by ``verifier`` (default: the shipped one),
    then :func:`domain_verifier`.  Nothing is written."""
    from llama_index_carag.verifier.model import shipped_verifier

    base = verifier if verifier is not None else shipped_verifier()
    chosen = reference_sample(len(claims), max_claims, seed)
    probabilities = base.batch_probabilities([(claims[i][0], list(claims[i][1]) or [""]) for i in chosen])
    return domain_verifier(base, probabilities)


def domain_verifier(base: ClaimVerifier, probabilities: Sequence[Any]) -> ClaimVerifier:
    """``base``'s weights and confidence map with :class:`DomainThresholds` fitted on ``probabilities`` (the
    reference claims' readings by ``base``, labels unread): the verifier an index gets without its labels.  Its
    ``record["domain_check"]`` says what the check read."""
    fitted = DomainThresholds(floor=base.threshold).fit(probabilities)
    adapted = ClaimVerifier(base.path)
    adapted.threshold, adapted.refuted_threshold = fitted.supported_, fitted.refuted_
    adapted.record = {**adapted.record, "domain_check": fitted.record()}
    return adapted
