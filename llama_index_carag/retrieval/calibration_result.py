"""The result of a per-corpus calibration of the stage weights: the chosen settings and what backs them.

:class:`Calibration` is what :func:`~llama_index_carag.retrieval.calibration.calibrate_corpus` returns, what a
fitted corpus keeps and persists, and what the retriever summarises into ``node.metadata["carag"]["calibration"]``.
:func:`calibrated_weights` names the weights a calibration may change: ``alpha`` (the thematic weight is
``1 - alpha``) and the weight of every registered term with a calibration grid.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llama_index_carag.ranking.assembly import rerank_terms
from llama_index_carag.ranking.rerank_term import RerankTerm
from llama_index_carag.settings import CaragSettings

logger = logging.getLogger(__name__)

#: The settings field of the stage's own calibrated weight: the thematic weight is ``1 - alpha``.
THEMATIC_WEIGHT = "alpha"


def calibrated_terms() -> list[RerankTerm]:
    """The registered terms the calibration re-weights (those with a grid), in registry order."""
    return [term for term in rerank_terms() if term.grid]


def calibrated_weights(settings: CaragSettings) -> dict[str, float]:
    """``{weight name: value}`` of the weights a calibration may change: ``alpha``, then each calibrated term's."""
    out = {THEMATIC_WEIGHT: float(getattr(settings, THEMATIC_WEIGHT))}
    out.update((term.weight_name, term.weight(settings)) for term in calibrated_terms())
    return out


@dataclass
class Calibration:
    """A corpus's calibrated stage weights and what backs them (JSON-safe through :meth:`to_json`).

    Attributes:
        base: the global preset the calibration started from.
        settings: the chosen settings (``base`` when the preset was kept).
        n_claims: linked claims scored by leave-one-out.
        base_ndcg, ndcg: their mean nDCG@10 under ``base`` and under ``settings``.
        gain, se: ``ndcg - base_ndcg`` and its paired standard error (in-sample: the claims that chose it).
        cv_gain: the gain of the whole selection rule out of fold (``folds``-fold over the claims).
        reason: why these settings (``"calibrated"``, ``"too few linked claims"``, …).
        candidates: every candidate: its factors, weights, nDCG@10, gain and standard error.
        links: claim node id → its linked evidence ids (kept so that ``refit()`` can calibrate again).
        seconds: the calibration's wall time (leave-one-out search and scoring).
    """

    base: CaragSettings
    settings: CaragSettings
    n_claims: int
    base_ndcg: float
    ndcg: float
    gain: float
    se: float
    cv_gain: float
    reason: str
    candidates: list[dict[str, Any]] = field(default_factory=list)
    links: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def weights(self) -> dict[str, float]:
        """The calibrated weights of :attr:`settings` (:func:`calibrated_weights`)."""
        return calibrated_weights(self.settings)

    def summary(self) -> dict[str, Any]:
        """The short form written into ``node.metadata["carag"]["calibration"]``."""
        return {
            "weights": self.weights,
            "base_weights": calibrated_weights(self.base),
            "n_claims": self.n_claims,
            "loo_ndcg": None if math.isnan(self.ndcg) else round(self.ndcg, 4),
            "gain": round(self.gain, 4),
            "cv_gain": round(self.cv_gain, 4),
            "reason": self.reason,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "base": self.base.model_dump(mode="json"),
            "settings": self.settings.model_dump(mode="json"),
            "n_claims": self.n_claims,
            "base_ndcg": None if math.isnan(self.base_ndcg) else self.base_ndcg,
            "ndcg": None if math.isnan(self.ndcg) else self.ndcg,
            "gain": self.gain,
            "se": self.se,
            "cv_gain": self.cv_gain,
            "reason": self.reason,
            "candidates": self.candidates,
            "links": self.links,
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, info: Mapping[str, Any]) -> Calibration:
        """The calibration :meth:`to_json` wrote (``KeyError`` / ``ValueError`` when unreadable)."""
        return cls(
            base=CaragSettings.model_validate(info["base"]),
            settings=CaragSettings.model_validate(info["settings"]),
            n_claims=int(info["n_claims"]),
            base_ndcg=math.nan if info["base_ndcg"] is None else float(info["base_ndcg"]),
            ndcg=math.nan if info["ndcg"] is None else float(info["ndcg"]),
            gain=float(info["gain"]),
            se=float(info["se"]),
            cv_gain=float(info["cv_gain"]),
            reason=str(info["reason"]),
            candidates=list(info.get("candidates", [])),
            links={str(k): [str(i) for i in v] for k, v in dict(info.get("links", {})).items()},
            seconds=float(info.get("seconds", 0.0)),
        )
