"""The one label-decision layer of scored verdicts: scored evidence in, a label and its reasons out.

:class:`~llama_index_carag.verdicts.synthesizer.FactCheckSynthesizer` computes what its :class:`LabelDecision`
asks for (:attr:`LabelDecision.needs`) into a :class:`ScoredEvidence` and the decision returns a
:class:`Decision`.  The decisions:

* :class:`VerifierDecision` (the default) — the claim verifier
  (:class:`~llama_index_carag.verifier.model.ClaimVerifier`, a cross-encoder trained for claim verification)
  reads each passage and decides; it needs no LLM score, so it runs with any LLM, or none when no explanation
  is asked for;
* :class:`ArgMaxDecision` (``decision="llm"`` in ``"score"`` mode) — the LLM's own label: the arg-max of its
  whole-evidence label log-likelihoods.  In the ``"structured"`` and ``"text"`` modes the LLM's own label is its
  parsed answer (no decision object).

:class:`VerdictSettings` holds the synthesizer's options (frozen).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from llama_index_carag.verdicts.types import STANCE_ORDER, PassageStance, VerdictLabel

#: Names of the decisions :class:`VerdictSettings` can ask for: the claim verifier, or the LLM's own label.
DECISIONS = ("verifier", "llm")
#: Ways to obtain the label (see :mod:`~llama_index_carag.verdicts.synthesizer`).
LABEL_MODES = ("auto", "score", "structured", "text")


@dataclass(frozen=True)
class VerdictSettings:
    """Options of a :class:`~llama_index_carag.verdicts.synthesizer.FactCheckSynthesizer`.

    Args:
        decision: who picks the label: ``"verifier"`` (default: the claim verifier, :class:`VerifierDecision`; the
            LLM only explains) or ``"llm"`` (the LLM's own label: in ``"score"`` mode the arg-max of its
            whole-evidence label log-likelihoods, :class:`ArgMaxDecision`; else its parsed answer).
        label_mode: ``"auto"``, ``"score"``, ``"structured"`` or ``"text"``.
        max_sentences: explanation length cap (papers: two).
        max_explanation_tokens: explanation budget in ``"score"`` mode (default: the LLM's, at most 96).
        show_ids: node ids beside the passage numbers in the prompt (default: not in ``"score"`` mode).
        explain_passages: at most this many of the passages the verifier's label rests on: shown in the
            explanation prompt of ``"score"`` mode (a long passage as the chunk the verifier read its stance
            from), cited when the explanation cites none of them.
        examples: worked examples shown before the claim (``prompts.VerdictExample``).
        explain: generate the explanation (default).  ``False`` (triage, ``carag check --no-explanation``):
            in ``"score"`` mode the labels are scored and decided and nothing is generated, the verdict's
            explanation is empty; the ``"structured"`` and ``"text"`` modes write their answer as usual.
    """

    decision: str = "verifier"
    label_mode: str = "auto"
    max_sentences: int = 2
    max_explanation_tokens: int | None = None
    show_ids: bool | None = None
    explain_passages: int = 3
    examples: tuple[Any, ...] = ()
    explain: bool = True

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"decision must be one of {DECISIONS}; got {self.decision!r}.")
        if self.label_mode not in LABEL_MODES:
            raise ValueError(f"label_mode must be one of {LABEL_MODES}; got {self.label_mode!r}.")
        if self.max_sentences < 1:
            raise ValueError("max_sentences must be >= 1.")
        if self.explain_passages < 1:
            raise ValueError("explain_passages must be >= 1.")
        object.__setattr__(self, "examples", tuple(self.examples or ()))


@dataclass(frozen=True)
class ScoredEvidence:
    """What a decision reads: the claim, its passages and the scores its :attr:`LabelDecision.needs` asked for.

    Attributes:
        claim: the claim text.
        texts: the passages as the LLM saw them, in rank order.
        ids: their node ids.
        joint: whole-evidence label log-likelihoods (``"joint"``), else ``None``.
    """

    claim: str
    texts: Sequence[str]
    ids: Sequence[str]
    joint: Mapping[VerdictLabel, float] | None = None


@dataclass(frozen=True)
class Decision:
    """A decision's result: the label, the 1-based passages it rests on, a short reason, the passages' stances
    it read (empty when it read none; a long passage's stance carries the excerpt it was read from) and P(the
    label is right) (``None`` when the decision has no calibration)."""

    label: VerdictLabel
    passages: tuple[int, ...] = ()
    reason: str = ""
    stances: tuple[PassageStance, ...] = ()
    confidence: float | None = None


def verifier_stances(
    probabilities: Any, ids: Sequence[str], excerpts: Sequence[str | None] | None = None
) -> tuple[PassageStance, ...]:
    """Each passage's :class:`PassageStance` from the verifier's probabilities (rows: passages; columns:
    SUPPORTED, REFUTED, NOT_ENOUGH_INFO): the stance is the most probable label, its score that probability;
    ``excerpts``: per passage, the chunk its stance was read from (``None`` for a passage read whole)."""
    out = []
    excerpts = list(excerpts) if excerpts is not None else [None] * len(ids)
    for number, (row, node_id, excerpt) in enumerate(zip(probabilities, ids, excerpts), start=1):
        probs = {label: float(p) for label, p in zip(STANCE_ORDER, row)}
        stance = max(STANCE_ORDER, key=lambda k: probs[k])
        out.append(
            PassageStance(
                number=number,
                id=str(node_id),
                stance=stance,
                score=round(probs[stance], 4),
                probabilities={k.value: round(v, 4) for k, v in probs.items()},
                logprobs={k.value: round(math.log(max(v, 1e-12)), 4) for k, v in probs.items()},
                excerpt=excerpt,
            )
        )
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
        probs, read = self.verifier.readings(evidence.claim, list(evidence.texts))
        found = self.verifier.decide(probs)
        texts = [str(text) for text in evidence.texts]
        read = [str(part) for part in read] if len(read) == len(texts) else texts  # read texts only when they match
        excerpts = [None if part.split() == text.split() else part for part, text in zip(read, texts)]
        return Decision(
            VerdictLabel(found.label),
            found.passages,
            f"verifier: {found.reason}",
            stances=verifier_stances(probs, evidence.ids, excerpts),
            confidence=found.confidence,
        )


class LabelDecision(Protocol):
    """Scored evidence in, :class:`Decision` out.  ``needs``: empty, or ``{"joint"}`` (the LLM's whole-evidence
    label log-likelihoods)."""

    @property
    def name(self) -> str: ...

    @property
    def needs(self) -> frozenset[str]: ...

    def decide(self, evidence: ScoredEvidence) -> Decision:
        """The label for ``evidence``."""


@dataclass(frozen=True)
class ArgMaxDecision:
    """The LLM's own label: the best whole-evidence label log-likelihood (ties go to the earlier label)."""

    name: str = "argmax"
    needs: frozenset[str] = frozenset({"joint"})

    def decide(self, evidence: ScoredEvidence) -> Decision:
        joint = evidence.joint
        if joint is None:
            raise ValueError("This decision needs 'joint' scores; the evidence has none.")
        label = max(STANCE_ORDER, key=lambda k: float(joint[k]))
        return Decision(label, reason="arg-max of the whole-evidence label log-likelihoods")


_SETTING_NAMES = frozenset(VerdictSettings.__dataclass_fields__)


def with_options(settings: VerdictSettings, options: dict[str, Any]) -> VerdictSettings:
    """``settings`` with keyword ``options`` applied (:class:`VerdictSettings` fields)."""
    unknown = sorted(set(options) - _SETTING_NAMES)
    if unknown:
        raise TypeError(
            f"Unknown FactCheckSynthesizer options {unknown}; VerdictSettings has {sorted(_SETTING_NAMES)}."
        )
    return replace(settings, **options) if options else settings


def resolve_decision(settings: VerdictSettings, verifier: Any = None) -> LabelDecision:
    """The decision ``settings.decision`` names: :class:`VerifierDecision` with ``verifier`` (default: the verifier
    shipped with the package) for ``"verifier"``, :class:`ArgMaxDecision` for ``"llm"``."""
    if settings.decision == "verifier":
        from llama_index_carag.verifier.model import shipped_verifier

        return VerifierDecision(verifier if verifier is not None else shipped_verifier())
    return ArgMaxDecision()
