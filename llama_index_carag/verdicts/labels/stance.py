"""Per-passage stance: each evidence passage scored on its own, the model's label prior divided out.

For every passage the LLM sees a short prompt with the claim and that one passage
(:data:`~llama_index_carag.verdicts.prompts.STANCE_CHAT_PROMPT`) and the three label strings are
scored after ``Verdict:`` (the same label-word log-likelihoods as the whole-evidence prompt,
:meth:`~llama_index_carag.verdicts.labels.label_scorer.LabelScorer.score`).  A passage's stance is
``SUPPORTED`` (it supports the claim), ``REFUTED`` (it refutes it) or ``NOT_ENOUGH_INFO`` (neither).

**Contextual calibration** (Zhao et al., 2021, "Calibrate before use"): the same prompt is scored
for content-free inputs (:data:`CONTENT_FREE_INPUTS`: claim and passage ``"N/A"``, ``""`` and
``"[MASK]"``); the mean of their label probabilities is the model's prior ``p_cf`` for this prompt.
Zhao et al. divide all of it out (``softmax(log p - log p_cf)``); for a stance a content-free passage
*should* say NOT ENOUGH INFO, so by default only its lean between SUPPORTED and REFUTED is divided
out (:func:`calibrated`).  It needs no labels of the data being checked.  The prior is computed once per model and prompt and cached in memory
(:class:`ContentFreePrior`).

Each prompt is scored on its own (the scorers evaluate a prompt from its first token), so a
passage's stance does not depend on the passages scored before it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index_carag.verdicts import VerdictLabel

logger = logging.getLogger(__name__)

__all__ = [
    "STANCE_ORDER",
    "SIDES",
    "CONTENT_FREE_INPUTS",
    "PassageStance",
    "ContentFreePrior",
    "label_probabilities",
    "calibrated",
    "stance_messages",
    "stance_scores",
    "score_passages",
]

#: Stance labels in their fixed order (ties go to the earlier one).
STANCE_ORDER = (VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO)
#: The two sides a passage can take; calibration balances them by default.
SIDES = (VerdictLabel.SUPPORTED, VerdictLabel.REFUTED)
#: Content-free ``(claim, passage)`` inputs for the prior (Zhao et al., 2021).
CONTENT_FREE_INPUTS: tuple[tuple[str, str], ...] = (("N/A", "N/A"), ("", ""), ("[MASK]", "[MASK]"))


@dataclass(frozen=True)
class PassageStance:
    """One passage's scored stance towards the claim.

    Attributes:
        number: the passage's 1-based number among the evidence.
        node_id: its node id.
        stance: the label with the highest calibrated probability.
        score: that probability (0-1).
        probabilities: the calibrated probability of each label.
        logprobs: the raw label log-likelihoods (before calibration).
    """

    number: int
    node_id: str
    stance: VerdictLabel
    score: float
    probabilities: Mapping[VerdictLabel, float]
    logprobs: Mapping[VerdictLabel, float]

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"number", "id", "stance", "score", "probabilities", "logprobs"}``."""
        return {
            "number": self.number,
            "id": self.node_id,
            "stance": self.stance.value,
            "score": round(self.score, 4),
            "probabilities": {k.value: round(float(v), 4) for k, v in self.probabilities.items()},
            "logprobs": {k.value: round(float(v), 4) for k, v in self.logprobs.items()},
        }


def label_probabilities(logprobs: Mapping[VerdictLabel, float]) -> dict[VerdictLabel, float]:
    """Softmax of the three label log-likelihoods (pure): ``{label: probability}``, summing to 1."""
    top = max(float(logprobs[k]) for k in STANCE_ORDER)
    weights = {k: math.exp(float(logprobs[k]) - top) for k in STANCE_ORDER}
    total = sum(weights.values())
    return {k: w / total for k, w in weights.items()}


def calibrated(
    logprobs: Mapping[VerdictLabel, float],
    prior: Mapping[VerdictLabel, float] | None,
    labels: Sequence[VerdictLabel] = SIDES,
) -> dict[VerdictLabel, float]:
    """Label probabilities with ``prior`` (probabilities, e.g. of content-free inputs) divided out (pure).

    The log-likelihood of each label in ``labels`` is shifted by ``-log(prior[k] / mean(prior[j] for j in
    labels))``; the others stay; then a softmax.  With all three labels this is contextual calibration
    (Zhao et al., 2021: ``softmax(log p - log prior)``).  With :data:`SIDES` (the default) only the
    balance of SUPPORTED against REFUTED is corrected: a content-free passage rightly says NOT ENOUGH
    INFO, so its NOT_ENOUGH_INFO probability is no bias to remove, while its lean to one side is.
    ``prior=None`` gives the plain softmax.
    """
    if prior is None:
        return label_probabilities(logprobs)
    if not labels or any(float(prior[k]) <= 0.0 for k in labels):
        raise ValueError(f"A calibration prior needs positive probabilities for {list(labels)}; got {dict(prior)}.")
    mean = sum(float(prior[k]) for k in labels) / len(labels)
    shifted = {k: float(logprobs[k]) - (math.log(float(prior[k]) / mean) if k in labels else 0.0) for k in STANCE_ORDER}
    return label_probabilities(shifted)


def stance_messages(claim: str, passage: str, template: Any = None) -> list[Any]:
    """The chat messages asking for one passage's stance towards ``claim`` (both fenced as data)."""
    from llama_index_carag.verdicts.prompts import STANCE_CHAT_PROMPT, fence

    template = template or STANCE_CHAT_PROMPT
    return template.format_messages(query_str=fence(claim), context_str=" ".join(fence(passage).split()))


def _scores(scorer: Any, messages: Sequence[Any]) -> dict[VerdictLabel, float]:
    scores = scorer.score(messages)[0]
    return {k: float(scores.logprobs[k]) for k in STANCE_ORDER}


_SLOT = "\x01"


def stance_scores(scorer: Any, claim: str, passages: Sequence[str]) -> list[dict[VerdictLabel, float]]:
    """The raw label log-likelihoods of each passage's stance prompt.

    With a scorer that shares a prompt prefix (:attr:`~.label_scorer.LabelScorer.shares_prefix`, llama.cpp)
    the claim's part of the prompt (system message, claim, up to the passage) is evaluated once per call,
    deterministically; otherwise each prompt is scored on its own.
    """
    if not scorer.shares_prefix or not passages:
        return [_scores(scorer, stance_messages(claim, p)) for p in passages]
    prefix = scorer.render(stance_messages(claim, _SLOT), "").split(_SLOT)[0]
    prompts = [scorer.render(stance_messages(claim, p), "") for p in passages]
    return [{k: float(d[k]) for k in STANCE_ORDER} for d in scorer.score_after_prefix(prefix, prompts)]


class ContentFreePrior:
    """The label prior of content-free inputs, per model and prompt, computed once (thread-safe).

    ``prior(scorer, key)`` scores :data:`CONTENT_FREE_INPUTS` through :func:`stance_scores` the first
    time a ``key`` (e.g. the model's name) is asked for, and returns the mean label probabilities.
    """

    def __init__(self, inputs: Sequence[tuple[str, str]] = CONTENT_FREE_INPUTS) -> None:
        if not inputs:
            raise ValueError("ContentFreePrior needs at least one content-free input.")
        self.inputs = tuple(inputs)
        self._cache: dict[str, dict[VerdictLabel, float]] = {}
        self._lock = threading.Lock()

    def prior(self, scorer: Any, key: str) -> dict[VerdictLabel, float]:
        """The mean label probabilities of the content-free inputs for ``key`` (cached)."""
        with self._lock:
            if key not in self._cache:
                probs = [label_probabilities(stance_scores(scorer, c, [p])[0]) for c, p in self.inputs]
                self._cache[key] = {k: sum(p[k] for p in probs) / len(probs) for k in STANCE_ORDER}
                logger.info(
                    "content-free prior for %s: %s", key, {k.value: round(v, 3) for k, v in self._cache[key].items()}
                )
            return dict(self._cache[key])

    def set(self, key: str, prior: Mapping[VerdictLabel, float]) -> None:
        """Store a prior computed elsewhere (e.g. read from a benchmark cache)."""
        with self._lock:
            self._cache[key] = {k: float(prior[k]) for k in STANCE_ORDER}


#: The process-wide prior cache (one entry per model name and prompt).
DEFAULT_PRIORS = ContentFreePrior()


def score_passages(
    scorer: Any,
    claim: str,
    passages: Sequence[str],
    ids: Sequence[str],
    prior: Mapping[VerdictLabel, float] | None,
    labels: Sequence[VerdictLabel] = SIDES,
) -> list[PassageStance]:
    """Each passage's :class:`PassageStance` (one prompt per passage, ``prior`` divided out, :func:`calibrated`)."""
    if len(passages) != len(ids):
        raise ValueError(f"{len(passages)} passages but {len(ids)} ids.")
    out = []
    for number, (logprobs, node_id) in enumerate(zip(stance_scores(scorer, claim, passages), ids), start=1):
        probs = calibrated(logprobs, prior, labels)
        stance = max(STANCE_ORDER, key=lambda k: probs[k])
        out.append(PassageStance(number, str(node_id), stance, probs[stance], probs, logprobs))
    return out
