"""The one label-decision layer of scored verdicts: scored evidence in, a label and its reasons out.

:class:`~llama_index_carag.verdicts.synthesizer.FactCheckSynthesizer` computes what its :class:`LabelDecision`
asks for (:attr:`LabelDecision.needs`) into a :class:`ScoredEvidence` and the decision returns a
:class:`Decision`.  The decisions:

* :class:`VerifierDecision` (the default) — the claim verifier
  (:class:`~llama_index_carag.verifier.model.ClaimVerifier`, a cross-encoder trained for claim verification)
  reads each passage and decides; it needs no LLM score, so it runs with any LLM, or none when no explanation
  is asked for.  The other decisions read the LLM's label scores (``"score"`` mode):
* :class:`StanceDecision` — each passage's calibrated stance
  (:mod:`~llama_index_carag.verdicts.labels.stance`), aggregated by :func:`strongest_stance`: the
  strongest supporting passage against the strongest refuting one; NOT_ENOUGH_INFO when no
  passage takes a stance.  Nothing is fitted on any domain;
* :class:`ArgMaxDecision` (the default, as measured on two domains: docs/VERDICTS.md) — the arg-max of
  the whole-evidence label log-likelihoods (plus optional per-label offsets), with the archive's label
  lean divided out when the synthesizer has a fitted
  :class:`~llama_index_carag.verdicts.labels.domain_prior.DomainLabelPrior` (round 4's default);
* :class:`RuleDecision` — the logistic ``EvidenceLabelRule`` fitted on FactVer's tuning half
  (kept for the side-by-side benchmark, docs/VERDICTS.md).

:class:`VerdictSettings` holds the synthesizer's options (frozen).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from llama_index_carag.verdicts.labels.stance import STANCE_ORDER, PassageStance, calibrated
from llama_index_carag.verdicts.types import VerdictLabel

logger = logging.getLogger(__name__)

__all__ = [
    "VerdictSettings",
    "ScoredEvidence",
    "Decision",
    "LabelDecision",
    "ArgMaxDecision",
    "RuleDecision",
    "StanceDecision",
    "ArchiveLabelDecision",
    "VerifierDecision",
    "verifier_stances",
    "strongest_stance",
    "DECISIONS",
    "CALIBRATIONS",
    "LABEL_MODES",
    "with_options",
    "resolve_decision",
]

#: Names of the decisions :class:`VerdictSettings` can ask for (``"llm"``: the LLM's own label — the index's
#: archive decision where it has one, else the arg-max; the free-text or structured answer for other LLMs).
DECISIONS = ("verifier", "llm", "archive", "argmax", "stance", "rule")
#: Calibrations of the per-passage stance with content-free inputs (Zhao et al., 2021): the
#: SUPPORTED/REFUTED balance only (``"content-free"``), all three labels (``"content-free-full"``), or none.
CALIBRATIONS = ("content-free", "content-free-full", "none")
#: Ways to obtain the label (see :mod:`~llama_index_carag.verdicts.synthesizer`).
LABEL_MODES = ("auto", "score", "structured", "text")


@dataclass(frozen=True)
class VerdictSettings:
    """Options of a :class:`~llama_index_carag.verdicts.synthesizer.FactCheckSynthesizer`.

    Args:
        decision: who picks the label: ``"verifier"`` (default: the claim verifier, :class:`VerifierDecision`; the
            LLM only explains), ``"llm"`` (the LLM's own label: in ``"score"`` mode ``"archive"`` where the index
            has an archive decision — ``carag index --calibrate`` — else ``"argmax"``), ``"archive"``
            (:class:`ArchiveLabelDecision`), ``"argmax"`` (whole-evidence arg-max, the archive's lean divided
            out where it was measured),
            ``"stance"`` (per-passage stances, :class:`StanceDecision`) or ``"rule"`` (the
            FactVer-fitted ``EvidenceLabelRule``, where one was measured for the LLM and the
            synthesizer has the encoder it was fitted with; arg-max otherwise).
        calibration: ``"content-free"`` (divide out the SUPPORTED/REFUTED lean of content-free inputs),
            ``"content-free-full"`` (all three labels, as Zhao et al.) or ``"none"``.
        label_mode: ``"auto"``, ``"score"``, ``"structured"`` or ``"text"``.
        max_sentences: explanation length cap (papers: two).
        max_explanation_tokens: explanation budget in ``"score"`` mode (default: the LLM's, at most 72).
        show_ids: node ids beside the passage numbers in the prompt (default: not in ``"score"`` mode).
        explain_passages: at most this many passages (those the label rests on) in the explanation
            prompt of the stance decision.
        label_bias: per-label offsets in nats for ``"argmax"`` (default none).
        examples: worked examples shown before the claim (``few_shot.VerdictExample``).
        explain: generate the explanation (default).  ``False`` (triage, ``carag check --no-explanation``):
            in ``"score"`` mode the labels are scored and decided and nothing is generated, the verdict's
            explanation is empty; the ``"structured"`` and ``"text"`` modes write their answer as usual.
    """

    decision: str = "verifier"
    calibration: str = "content-free"
    label_mode: str = "auto"
    max_sentences: int = 2
    max_explanation_tokens: int | None = None
    show_ids: bool | None = None
    explain_passages: int = 3
    label_bias: Mapping[str, float] = field(default_factory=dict)
    examples: tuple[Any, ...] = ()
    explain: bool = True

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"decision must be one of {DECISIONS}; got {self.decision!r}.")
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}; got {self.calibration!r}.")
        if self.label_mode not in LABEL_MODES:
            raise ValueError(f"label_mode must be one of {LABEL_MODES}; got {self.label_mode!r}.")
        if self.max_sentences < 1:
            raise ValueError("max_sentences must be >= 1.")
        if self.explain_passages < 1:
            raise ValueError("explain_passages must be >= 1.")
        object.__setattr__(self, "examples", tuple(self.examples or ()))
        bias = {
            VerdictLabel.from_fever(str(getattr(k, "value", k))).value: float(v)
            for k, v in dict(self.label_bias or {}).items()
        }
        object.__setattr__(self, "label_bias", bias)


@dataclass(frozen=True)
class ScoredEvidence:
    """What a decision reads: the claim, its passages and the scores its :attr:`LabelDecision.needs` asked for.

    Attributes:
        claim: the claim text.
        texts: the passages as the LLM saw them, in rank order.
        ids: their node ids.
        joint: whole-evidence label log-likelihoods (``"joint"``), else ``None``.
        stances: each passage's :class:`PassageStance` (``"stances"``), else ``None``.
        cosines: claim-passage cosines, shape ``(n_passages,)`` (``"cosines"``), else ``None``.
        claim_embedding: the claim's embedding with the retriever's encoder (``"embedding"``), else ``None``.
    """

    claim: str
    texts: Sequence[str]
    ids: Sequence[str]
    joint: Mapping[VerdictLabel, float] | None = None
    stances: Sequence[PassageStance] | None = None
    cosines: Sequence[float] | None = None
    claim_embedding: Sequence[float] | None = None


@dataclass(frozen=True)
class Decision:
    """A decision's result: the label, the 1-based passages it rests on, a short reason, per passage the
    refutation cues it read (``cues[i]`` for passage ``i + 1``; empty when the decision reads none) and the
    passages' stances it read (empty when it read none)."""

    label: VerdictLabel
    passages: tuple[int, ...] = ()
    reason: str = ""
    cues: tuple[tuple[str, ...], ...] = ()
    stances: tuple[PassageStance, ...] = ()


def verifier_stances(probabilities: Any, ids: Sequence[str]) -> tuple[PassageStance, ...]:
    """Each passage's :class:`PassageStance` from the verifier's probabilities (rows: passages; columns:
    SUPPORTED, REFUTED, NOT_ENOUGH_INFO): the stance is the most probable label, its score that probability."""
    out = []
    for number, (row, node_id) in enumerate(zip(probabilities, ids), start=1):
        probs = {label: float(p) for label, p in zip(STANCE_ORDER, row)}
        stance = max(STANCE_ORDER, key=lambda k: probs[k])
        logs = {k: math.log(max(v, 1e-12)) for k, v in probs.items()}
        out.append(PassageStance(number, str(node_id), stance, probs[stance], probs, logs))
    return tuple(out)


@dataclass(frozen=True)
class VerifierDecision:
    """The claim verifier decides (:meth:`~llama_index_carag.verifier.model.ClaimVerifier.decide`): the strongest
    support against the strongest refutation among the passages, NOT_ENOUGH_INFO when neither reaches its threshold
    (or, for an archive verifier with a fitted head, the head's label).

    ``verifier``: a :class:`~llama_index_carag.verifier.model.ClaimVerifier` (the shipped one, or the index's
    archive-adapted one from ``carag index --calibrate``).  Needs no LLM score; every passage's stance is read.
    """

    verifier: Any
    name: str = "verifier"
    needs: frozenset[str] = frozenset()

    def decide(self, evidence: ScoredEvidence) -> Decision:
        probs = self.verifier.probabilities(evidence.claim, list(evidence.texts))
        found = self.verifier.decide(probs)
        stances = verifier_stances(probs, evidence.ids)
        return Decision(VerdictLabel(found.label), found.passages, f"verifier: {found.reason}", stances=stances)


class LabelDecision(Protocol):
    """Scored evidence in, :class:`Decision` out.  ``needs``: a subset of
    ``{"joint", "stances", "cosines", "embedding"}``."""

    @property
    def name(self) -> str: ...

    @property
    def needs(self) -> frozenset[str]: ...

    def decide(self, evidence: ScoredEvidence) -> Decision:
        """The label for ``evidence``."""


def _require(evidence: ScoredEvidence, what: str) -> Any:
    value = getattr(evidence, what)
    if value is None:
        raise ValueError(f"This decision needs {what!r} scores; the evidence has none.")
    return value


@dataclass(frozen=True)
class ArgMaxDecision:
    """The best whole-evidence label log-likelihood plus ``bias`` (nats per label).

    ``prior``: a domain's label lean (``{label: probability}``, e.g. a fitted
    :class:`~llama_index_carag.verdicts.labels.domain_prior.DomainLabelPrior`'s ``joint_``), divided out first.
    """

    bias: Mapping[str, float] = field(default_factory=dict)
    prior: Mapping[VerdictLabel, float] | None = None
    name: str = "argmax"
    needs: frozenset[str] = frozenset({"joint"})

    def decide(self, evidence: ScoredEvidence) -> Decision:
        joint = _require(evidence, "joint")
        if self.prior is not None:
            probs = calibrated(joint, self.prior, STANCE_ORDER)
            joint = {k: math.log(max(probs[k], 1e-300)) for k in STANCE_ORDER}
        label = max(VerdictLabel, key=lambda k: float(joint[k]) + float(self.bias.get(k.value, 0.0)))
        why = "arg-max of the whole-evidence label log-likelihoods"
        return Decision(label, reason=why + (", the archive's label lean divided out" if self.prior else ""))


@dataclass(frozen=True)
class RuleDecision:
    """The FactVer-fitted ``EvidenceLabelRule`` on the whole-evidence scores and the claim-passage cosines."""

    rule: Any
    name: str = "rule"
    needs: frozenset[str] = frozenset({"joint", "cosines"})

    def decide(self, evidence: ScoredEvidence) -> Decision:
        label = self.rule.predict(_require(evidence, "joint"), _require(evidence, "cosines"))
        return Decision(label, reason="label rule fitted on FactVer's tuning half")


@dataclass(frozen=True)
class ArchiveLabelDecision:
    """The index's archive decision (:class:`~llama_index_carag.verdicts.labels.archive_decision.ArchiveDecision`,
    fitted by ``carag index --calibrate``) with the LLM's whole-evidence scores, the archive's lean divided out.

    ``lean``: the LLM's label lean on this archive (``DomainLabelPrior.joint_``), or ``None``.  The decision rests
    on the passages showing a refutation cue when the label is REFUTED, else on the passages closest to the claim.
    """

    archive: Any
    lean: Mapping[VerdictLabel, float] | None = None
    name: str = "archive"
    needs: frozenset[str] = frozenset({"joint", "cosines", "embedding"})

    def decide(self, evidence: ScoredEvidence) -> Decision:
        from llama_index_carag.verdicts.labels.archive_decision import joint_matrix
        from llama_index_carag.verdicts.labels.archive_features import ClaimSignals, archive_features, passage_cues

        signals = ClaimSignals(
            evidence.claim, _require(evidence, "claim_embedding"), evidence.texts, _require(evidence, "cosines")
        )
        x = archive_features([signals])
        pred = self.archive.predict(x, joint_matrix([_require(evidence, "joint")]), self.lean)[0]
        label = VerdictLabel(str(pred))
        cues = [(i + 1, tuple(passage_cues(evidence.claim, t))) for i, t in enumerate(evidence.texts)]
        flagged = tuple(n for n, found in cues if found)
        closest = tuple(int(i) + 1 for i in sorted(range(len(signals.cosines)), key=lambda i: -signals.cosines[i]))
        passages = flagged + tuple(n for n in closest if n not in flagged) if label == VerdictLabel.REFUTED else closest
        why = self.archive.reason()
        if not self.archive.has_model:  # the LLM's scores decide alone: say whether a lean was divided out
            lean = ", the archive's label lean divided out" if self.lean is not None else ", no label lean measured"
            why = f"arg-max of the whole-evidence label log-likelihoods{lean} (no archive model: {why.split(': ', 1)[-1]})"
        if flagged:
            why += "; cues: " + ", ".join(f"[{n}] {' and '.join(found)}" for n, found in cues if found)
        return Decision(label, passages[:3], why, tuple(found for _, found in cues))


def strongest_stance(stances: Sequence[PassageStance]) -> Decision:
    """The claim's label from its passages' stances (pure, nothing fitted).

    SUPPORTED if the strongest supporting passage (highest calibrated probability among the passages
    whose stance is SUPPORTED) is stronger than the strongest refuting one, REFUTED if weaker,
    NOT_ENOUGH_INFO if no passage supports or refutes (or the two are exactly equal).  The decision
    rests on the passages of the winning stance (strongest first); for NOT_ENOUGH_INFO, on all of them.
    """
    by = {
        k: sorted((s for s in stances if s.stance == k), key=lambda s: (-s.score, s.number))
        for k in (VerdictLabel.SUPPORTED, VerdictLabel.REFUTED)
    }
    best = {k: (v[0].score if v else 0.0) for k, v in by.items()}
    s, r = best[VerdictLabel.SUPPORTED], best[VerdictLabel.REFUTED]
    if s == r:
        nums = tuple(x.number for x in stances)
        why = "no passage supports or refutes the claim" if s == 0 else "support and refutation are equally strong"
        return Decision(VerdictLabel.NOT_ENOUGH_INFO, nums, why)
    label = VerdictLabel.SUPPORTED if s > r else VerdictLabel.REFUTED
    nums = tuple(x.number for x in by[label])
    verb = "supports" if label == VerdictLabel.SUPPORTED else "refutes"
    return Decision(label, nums, f"passage [{nums[0]}] {verb} the claim (p={max(s, r):.2f})")


@dataclass(frozen=True)
class StanceDecision:
    """Each passage's calibrated stance, aggregated by :func:`strongest_stance`."""

    name: str = "stance"
    needs: frozenset[str] = frozenset({"stances"})

    def decide(self, evidence: ScoredEvidence) -> Decision:
        return strongest_stance(_require(evidence, "stances"))


_SETTING_NAMES = frozenset(VerdictSettings.__dataclass_fields__)


def with_options(settings: VerdictSettings, options: dict[str, Any]) -> VerdictSettings:
    """``settings`` with keyword ``options`` applied (:class:`VerdictSettings` fields)."""
    unknown = sorted(set(options) - _SETTING_NAMES)
    if unknown:
        raise TypeError(
            f"Unknown FactCheckSynthesizer options {unknown}; VerdictSettings has {sorted(_SETTING_NAMES)}."
        )
    return replace(settings, **options) if options else settings


def resolve_decision(
    settings: VerdictSettings,
    llm: Any,
    embed_model: Any,
    domain_prior: Any = None,
    archive_decision: Any = None,
    verifier: Any = None,
) -> LabelDecision:
    """The decision ``settings.decision`` names, for ``llm``.

    ``"verifier"``: :class:`VerifierDecision` with ``verifier`` (default: the verifier shipped with the package).

    ``"rule"``: the LLM's measured ``EvidenceLabelRule`` if it has one and ``embed_model`` is its encoder,
    else the arg-max.  ``domain_prior``: a fitted ``DomainLabelPrior``; the arg-max and the archive decision
    divide out its ``joint_`` lean.  ``archive_decision``: the index's fitted ``ArchiveDecision`` (``"auto"``
    uses it when given; ``"archive"`` requires it).
    """
    if settings.decision == "verifier":
        from llama_index_carag.verifier.model import shipped_verifier

        return VerifierDecision(verifier if verifier is not None else shipped_verifier())
    joint_prior = None if domain_prior is None or settings.calibration == "none" else domain_prior.joint_
    if settings.decision == "archive" and archive_decision is None:
        raise ValueError("decision='archive' needs the index's archive decision (carag index --calibrate).")
    if settings.decision in ("llm", "archive") and archive_decision is not None:
        return ArchiveLabelDecision(archive_decision, joint_prior)
    if settings.decision == "stance":
        return StanceDecision()
    if settings.decision == "rule":
        from llama_index_carag.verdicts.labels.rules import applicable_rule

        rule = applicable_rule("measured", llm, embed_model)
        if rule is not None:
            return RuleDecision(rule)
    return ArgMaxDecision(settings.label_bias, joint_prior)
