"""A measured label rule for scored verdicts: the label log-likelihoods plus how close the evidence is.

The arg-max of the three label log-likelihoods ignores whether the passages are about the
claim at all, which is what NOT ENOUGH INFO hinges on.  :class:`EvidenceLabelRule` is a
multinomial logistic regression on five numbers per verdict (:func:`rule_features`):

* the three label log-likelihoods, normalised over the labels (a log-softmax);
* the best and the mean cosine between the claim and its passages, from a sentence encoder
  (:func:`evidence_cosines`; the rule records which encoder, and cosines from another
  encoder are on another scale, so the rule is then not applied).

Rules are fitted on FactVer's tuning half only (``benchmarks/bench_prompts.py fit-rule``)
and kept where they beat the plain arg-max by the margin declared in advance
(docs/VERDICTS.md); :func:`measured_rule` finds the one for an LLM by its
:func:`~llama_index_carag.models.resolve.llm_name`.  They are stored as JSON in
``llama_index_carag/data/label_rules.json`` (no pickle).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from llama_index_carag.verdicts import VerdictLabel

logger = logging.getLogger(__name__)

__all__ = ["EvidenceLabelRule", "rule_features", "evidence_cosines", "measured_rule", "load_rules", "applicable_rule"]

_ORDER = (VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO)
_RULES_FILE = "label_rules.json"


def rule_features(logprobs: Mapping[VerdictLabel, float], cosines: Sequence[float]) -> np.ndarray:
    """The five features of a verdict, shape ``(5,)``: log-softmax of the S/R/N log-likelihoods, max and mean cosine.

    No passages give cosines of 0.
    """
    v = np.array([float(logprobs[k]) for k in _ORDER], dtype=np.float64)
    v = v - np.logaddexp.reduce(v)
    cos = np.asarray(cosines, dtype=np.float64).reshape(-1)
    return np.concatenate([v, [cos.max() if cos.size else 0.0, cos.mean() if cos.size else 0.0]])


def evidence_cosines(
    embed_model: Any, claim: str, passages: Sequence[str], *, claim_embedding: Sequence[float] | None = None
) -> np.ndarray:
    """Cosine between the claim and each passage, shape ``(n_passages,)``, with a LlamaIndex embed model.

    ``claim_embedding``: the claim's vector when it is embedded already (not embedded again).
    A claim check passes the retriever's own cosines instead (``claim_similarity`` in the provenance).
    """
    if not passages:
        return np.zeros(0, dtype=np.float32)
    from llama_index_carag.core.vectors import l2_normalize

    if claim_embedding is None:
        claim_embedding = embed_model.get_query_embedding(claim)
    q = l2_normalize(np.asarray(claim_embedding, dtype=np.float32))
    p = l2_normalize(np.asarray(embed_model.get_text_embedding_batch(list(passages)), dtype=np.float32))
    return p @ q


@dataclass(frozen=True)
class EvidenceLabelRule:
    """Multinomial logistic regression from :func:`rule_features` to a label.

    Args:
        encoder: the embed model name (:func:`~llama_index_carag.models.resolve.embed_model_name`) the
            cosines were computed with.
        coef: weights, shape ``(3, 5)``, rows in SUPPORTED, REFUTED, NOT_ENOUGH_INFO order.
        intercept: shape ``(3,)``.
        info: how it was fitted and measured (free-form, kept for the record).
    """

    encoder: str
    coef: tuple[tuple[float, ...], ...]
    intercept: tuple[float, ...]
    info: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if np.asarray(self.coef).shape != (3, 5) or np.asarray(self.intercept).shape != (3,):
            raise ValueError("EvidenceLabelRule needs coef of shape (3, 5) and intercept of shape (3,).")

    def decision(self, logprobs: Mapping[VerdictLabel, float], cosines: Sequence[float]) -> dict[VerdictLabel, float]:
        """The rule's score per label (higher wins)."""
        z = self._scores(rule_features(logprobs, cosines)[None, :])[0]
        return dict(zip(_ORDER, map(float, z)))

    def predict(self, logprobs: Mapping[VerdictLabel, float], cosines: Sequence[float]) -> VerdictLabel:
        """The label the rule picks."""
        return self.predict_features(rule_features(logprobs, cosines)[None, :])[0]

    def predict_features(self, features: np.ndarray) -> list[VerdictLabel]:
        """Labels for rows of :func:`rule_features`, shape ``(n, 5)`` → ``n`` labels."""
        return [_ORDER[i] for i in np.argmax(self._scores(features), axis=1)]

    def _scores(self, features: np.ndarray) -> np.ndarray:
        return np.asarray(features, dtype=np.float64) @ np.asarray(self.coef).T + np.asarray(self.intercept)

    @classmethod
    def fit(
        cls, features: np.ndarray, gold: Sequence[str | VerdictLabel], encoder: str, **info: Any
    ) -> EvidenceLabelRule:
        """Fit on rows of :func:`rule_features` (shape ``(n, 5)``) and their gold labels (FEVER names or T/F/N)."""
        from sklearn.linear_model import LogisticRegression

        y = [_ORDER.index(g if isinstance(g, VerdictLabel) else VerdictLabel.from_fever(g)) for g in gold]
        model = LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced").fit(np.asarray(features), y)
        if list(model.classes_) != [0, 1, 2]:
            raise ValueError("EvidenceLabelRule.fit needs rows of all three labels.")
        return cls(encoder, tuple(map(tuple, model.coef_.tolist())), tuple(model.intercept_.tolist()), info or None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "encoder": self.encoder,
            "coef": [list(r) for r in self.coef],
            "intercept": list(self.intercept),
            "info": dict(self.info or {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvidenceLabelRule:
        return cls(
            str(data["encoder"]),
            tuple(tuple(float(x) for x in r) for r in data["coef"]),
            tuple(float(x) for x in data["intercept"]),
            data.get("info"),
        )


def load_rules() -> dict[str, EvidenceLabelRule]:
    """The measured rules shipped with the package, by LLM name."""
    try:
        text = resources.files("llama_index_carag.data").joinpath(_RULES_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    return {name: EvidenceLabelRule.from_dict(d) for name, d in json.loads(text).items()}


def measured_rule(llm_name: str | None) -> EvidenceLabelRule | None:
    """The measured rule for an LLM name (``None`` if none was kept for it)."""
    return load_rules().get(str(llm_name)) if llm_name else None


def applicable_rule(
    rule: EvidenceLabelRule | str | None, llm: Any, embed_model: Any | None
) -> EvidenceLabelRule | None:
    """The rule a synthesizer applies: ``rule`` (or, for ``"measured"``, the LLM's measured one), if usable.

    A rule is usable only with an ``embed_model`` that is the encoder it was fitted with (cosines of
    another encoder are on another scale); otherwise ``None`` (the plain arg-max), with a log line.
    """
    from llama_index_carag.models.resolve import embed_model_name, llm_name

    if isinstance(rule, str):
        if rule != "measured":
            raise ValueError(f"rule must be 'measured', None or an EvidenceLabelRule; got {rule!r}.")
        rule = measured_rule(llm_name(llm))
    if rule is None:
        return None
    if embed_model is None:
        logger.warning(
            "This LLM has a measured label rule, but no embed_model was given, so labels are the plain "
            "arg-max; pass embed_model=retriever.embed_model (%s) to apply it.",
            rule.encoder,
        )
        return None
    if embed_model_name(embed_model) != rule.encoder:
        logger.warning(
            "The label rule was fitted with %s cosines, not %s: not applied (plain arg-max).",
            rule.encoder,
            embed_model_name(embed_model),
        )
        return None
    return rule
