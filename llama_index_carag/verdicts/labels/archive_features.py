"""Per-claim features of the archive decision, from what one claim check already computed.

:class:`ClaimSignals` holds what the pipeline has for one claim and its evidence passages; it is
built either from a live check (:meth:`ClaimSignals.from_nodes`: the scored labels and the nodes the
retriever returned, whose ``node.metadata["carag"]`` provenance carries the cosines, BM25 scores and
SOI membership) or from a verdict-cache line (:meth:`ClaimSignals.from_cache_row`,
:mod:`~llama_index_carag.evaluation.verdict_cache`, which holds no BM25 score and no SOI membership).

:data:`FEATURE_GROUPS` is the one registry of features, a group per signal; a group is *available*
for a claim only when its signal is there (:func:`available_groups`), and :func:`archive_features`
refuses a group a claim lacks, so a feature set always says what it was computed from:

* ``joint`` (3): the whole-evidence label log-likelihoods normalised to log-probabilities
  (SUPPORTED, REFUTED, NOT_ENOUGH_INFO) — always first: the archive decision's label-free fallback
  reads these three columns;
* ``passages`` (6): each passage's stance-prompt label probabilities, mean and max per label;
* ``cosines`` (2): claim–passage cosines, max and mean;
* ``bm25`` (1): the largest BM25 score among the passages (provenance ``lexical_score``);
* ``soi`` (1): the share of passages in the claim's SOI (provenance ``in_soi``);
* ``cues`` (2): refutation cues between the claim and each passage's text — the share of passages
  that state numbers but none of the claim's numbers (:func:`number_mismatch`) and the share whose
  negation differs from the claim's (:func:`negation_mismatch`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llama_index_carag.core.provenance import CARAG_METADATA_KEY
from llama_index_carag.verdicts.labels.stance import STANCE_ORDER, label_probabilities
from llama_index_carag.verdicts.types import VerdictLabel

logger = logging.getLogger(__name__)

__all__ = [
    "ClaimSignals",
    "FEATURE_GROUPS",
    "available_groups",
    "archive_features",
    "feature_names",
    "number_mismatch",
    "negation_mismatch",
]

_NUMBER_RE = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
_NEGATION_RE = re.compile(r"\b(?:not|no|never|none|nor|neither|without|cannot)\b|n't\b", re.I)


@dataclass(frozen=True)
class ClaimSignals:
    """What one claim check has: the claim, its passages' texts and the scores computed for them.

    Attributes:
        claim: the claim text.
        joint: whole-evidence label log-likelihoods ``{label: value}`` (needed).
        passages: each passage's stance-prompt label log-likelihoods, or ``None``.
        texts: the passages' texts, or ``None`` (the cache holds ids only).
        cosines: claim–passage cosines, or ``None``.
        bm25: the passages' BM25 scores, or ``None``.
        in_soi: whether each passage is in the claim's SOI, or ``None``.
    """

    claim: str
    joint: Mapping[VerdictLabel, float]
    passages: Sequence[Mapping[VerdictLabel, float]] | None = None
    texts: Sequence[str] | None = None
    cosines: Sequence[float] | None = None
    bm25: Sequence[float] | None = None
    in_soi: Sequence[bool] | None = None

    @classmethod
    def from_cache_row(cls, row: Mapping[str, Any], texts: Sequence[str] | None = None) -> ClaimSignals:
        """The signals of a verdict-cache claim line (``texts``: its passages' texts, looked up by the caller)."""

        def labels(d: Mapping[str, float]) -> dict[VerdictLabel, float]:
            return {VerdictLabel(k): float(v) for k, v in d.items()}

        passages = row.get("passages")
        return cls(
            claim=str(row["claim"]),
            joint=labels(row["joint"]),
            passages=None if passages is None else [labels(p) for p in passages],
            texts=None if texts is None else list(texts),
            cosines=row.get("cosines"),
        )

    @classmethod
    def from_nodes(
        cls,
        claim: str,
        nodes: Sequence[Any],
        joint: Mapping[VerdictLabel, float],
        passages: Sequence[Mapping[VerdictLabel, float]] | None = None,
    ) -> ClaimSignals:
        """The signals of a live check: ``nodes`` (``NodeWithScore``) as retrieved, their provenance read.

        A provenance value is used only when every node has it (annotated evidence has no provenance).
        """
        infos = [(getattr(n, "node", n).metadata or {}).get(CARAG_METADATA_KEY) or {} for n in nodes]

        def column(key: str) -> list[Any] | None:
            values = [info.get(key) for info in infos]
            return values if values and all(v is not None for v in values) else None

        return cls(
            claim=claim,
            joint=dict(joint),
            passages=None if passages is None else list(passages),
            texts=[getattr(n, "node", n).get_content() for n in nodes],
            cosines=column("claim_similarity"),
            bm25=column("lexical_score"),
            in_soi=column("in_soi"),
        )


def number_mismatch(claim: str, passage: str) -> bool:
    """True when the claim states numbers, the passage states numbers, and none of the claim's is among them."""
    mine = {n.replace(",", "") for n in _NUMBER_RE.findall(claim)}
    theirs = {n.replace(",", "") for n in _NUMBER_RE.findall(passage)}
    return bool(mine) and bool(theirs) and not (mine & theirs)


def negation_mismatch(claim: str, passage: str) -> bool:
    """True when exactly one of the claim and the passage contains a negation word (not, no, never, n't ...)."""
    return bool(_NEGATION_RE.search(claim)) != bool(_NEGATION_RE.search(passage))


def _joint(s: ClaimSignals) -> list[float]:
    probs = label_probabilities(s.joint)
    return [float(np.log(max(probs[k], 1e-12))) for k in STANCE_ORDER]


def _passages(s: ClaimSignals) -> list[float]:
    probs = np.array([[label_probabilities(p)[k] for k in STANCE_ORDER] for p in s.passages or []])
    if probs.size == 0:
        return [0.0] * 6
    return [*probs.mean(axis=0).tolist(), *probs.max(axis=0).tolist()]


def _cosines(s: ClaimSignals) -> list[float]:
    values = np.asarray(s.cosines or [0.0], dtype=float)
    return [float(values.max()), float(values.mean())]


def _bm25(s: ClaimSignals) -> list[float]:
    return [float(max(s.bm25 or [0.0]))]


def _soi(s: ClaimSignals) -> list[float]:
    flags = list(s.in_soi or [])
    return [float(np.mean(flags)) if flags else 0.0]


def _cues(s: ClaimSignals) -> list[float]:
    texts = list(s.texts or [])
    if not texts:
        return [0.0, 0.0]
    return [
        float(np.mean([number_mismatch(s.claim, t) for t in texts])),
        float(np.mean([negation_mismatch(s.claim, t) for t in texts])),
    ]


@dataclass(frozen=True)
class _Group:
    names: tuple[str, ...]
    signal: str
    compute: Callable[[ClaimSignals], list[float]]


_L = ("S", "R", "N")
#: The feature registry: group name -> its feature names, the signal it needs, and how it is computed.
FEATURE_GROUPS: dict[str, _Group] = {
    "joint": _Group(tuple(f"joint_logp_{k}" for k in _L), "joint", _joint),
    "passages": _Group(tuple(f"passage_{agg}_{k}" for agg in ("mean", "max") for k in _L), "passages", _passages),
    "cosines": _Group(("cosine_max", "cosine_mean"), "cosines", _cosines),
    "bm25": _Group(("bm25_max",), "bm25", _bm25),
    "soi": _Group(("soi_share",), "in_soi", _soi),
    "cues": _Group(("number_mismatch_share", "negation_mismatch_share"), "texts", _cues),
}


def available_groups(signals: Sequence[ClaimSignals]) -> tuple[str, ...]:
    """The feature groups every one of ``signals`` has the signal for, in registry order."""
    return tuple(
        name
        for name, group in FEATURE_GROUPS.items()
        if signals and all(getattr(s, group.signal) is not None for s in signals)
    )


def feature_names(groups: Sequence[str]) -> list[str]:
    """The column names of :func:`archive_features` for ``groups`` (``joint`` must come first)."""
    _check_groups(groups)
    return [n for g in groups for n in FEATURE_GROUPS[g].names]


def _check_groups(groups: Sequence[str]) -> None:
    unknown = sorted(set(groups) - set(FEATURE_GROUPS))
    if unknown:
        raise ValueError(f"Unknown feature groups {unknown}; known: {sorted(FEATURE_GROUPS)}.")
    if not groups or groups[0] != "joint":
        raise ValueError("The feature groups must start with 'joint' (the fallback reads its three columns).")


def archive_features(signals: Sequence[ClaimSignals], groups: Sequence[str]) -> np.ndarray:
    """The feature matrix of ``signals``, shape ``(n_claims, len(feature_names(groups)))``.

    Raises ``ValueError`` when a claim lacks the signal of a requested group.
    """
    _check_groups(groups)
    rows = []
    for i, s in enumerate(signals):
        row: list[float] = []
        for g in groups:
            group = FEATURE_GROUPS[g]
            if getattr(s, group.signal) is None:
                raise ValueError(f"Claim {i} has no {group.signal!r}: feature group {g!r} cannot be computed.")
            row.extend(group.compute(s))
        rows.append(row)
    return np.asarray(rows, dtype=float).reshape(len(rows), len(feature_names(groups)))
