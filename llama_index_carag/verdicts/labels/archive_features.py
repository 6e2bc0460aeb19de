"""Per-claim features of the archive decision: what the claim check has without another LLM call.

:class:`ClaimSignals` holds what the pipeline has for one claim and its evidence passages: the claim,
its embedding (the retriever's query embedding), the passages' texts and their claim cosines (the
retriever's provenance ``claim_similarity``, or computed with the same encoder for evidence given by
hand).  :meth:`ClaimSignals.from_nodes` reads them off a live check.

:data:`FEATURE_GROUPS` is the one registry of features, one :class:`FeatureGroup` per signal; a new
feature is one entry.  The declared groups (:data:`DECLARED_GROUPS`, fixed before any report number):

* ``cosines`` (2): claim–passage cosines, max and mean — how close the evidence is to the claim
  (NOT_ENOUGH_INFO evidence tends to be further away);
* ``cues`` (2): refutation cues between the claim and each passage — the share of passages that state
  numbers but none of the claim's numbers (:func:`number_mismatch`) and the share whose negation
  differs from the claim's (:func:`negation_mismatch`);
* ``claim`` (the encoder's dimension): the claim's own embedding, unit length — what the archive's
  claims of each label look like.  This reads the claim alone, not the evidence: a decision fitted on it
  learns the archive's label lean by wording (as claim-only baselines do on FEVER-style data) and is
  reported beside the others, never as evidence reasoning.

The LLM's whole-evidence label scores are not features here: the archive decision combines them with
its fitted model (:mod:`~llama_index_carag.verdicts.labels.archive_decision`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llama_index_carag.ranking.stage import CARAG_METADATA_KEY

logger = logging.getLogger(__name__)

__all__ = [
    "ClaimSignals",
    "FeatureGroup",
    "FEATURE_GROUPS",
    "DECLARED_GROUPS",
    "archive_features",
    "feature_names",
    "number_mismatch",
    "negation_mismatch",
    "passage_cues",
]

_NUMBER_RE = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
_NEGATION_RE = re.compile(r"\b(?:not|no|never|none|nor|neither|without|cannot)\b|n't\b", re.I)


@dataclass(frozen=True)
class ClaimSignals:
    """What one claim check has: the claim, its embedding, its passages' texts and their claim cosines.

    Attributes:
        claim: the claim text.
        embedding: the claim's embedding (the retriever's encoder).
        texts: the passages' texts, in rank order.
        cosines: claim–passage cosines, one per passage.
    """

    claim: str
    embedding: Sequence[float]
    texts: Sequence[str]
    cosines: Sequence[float]

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.cosines):
            raise ValueError(f"{len(self.texts)} passages but {len(self.cosines)} cosines.")
        if len(self.embedding) == 0:
            raise ValueError("The claim embedding is empty.")

    @classmethod
    def from_nodes(cls, claim: str, embedding: Sequence[float], nodes: Sequence[Any]) -> ClaimSignals:
        """The signals of a live check: ``nodes`` (``NodeWithScore``) as retrieved, cosines from their provenance
        (``claim_similarity``); a node without one gets its cosine from its own embedding, else ``ValueError``."""
        claim_vec = _unit(embedding)
        cosines = []
        for n in nodes:
            node = getattr(n, "node", n)
            info = (node.metadata or {}).get(CARAG_METADATA_KEY) or {}
            if info.get("claim_similarity") is not None:
                cosines.append(float(info["claim_similarity"]))
            elif node.embedding is not None:
                cosines.append(float(_unit(node.embedding) @ claim_vec))
            else:
                raise ValueError(f"Passage {node.node_id!r} has neither a claim cosine nor an embedding.")
        return cls(claim, list(map(float, embedding)), [getattr(n, "node", n).get_content() for n in nodes], cosines)


def _unit(v: Sequence[float]) -> np.ndarray:
    a = np.asarray(v, dtype=float)
    norm = float(np.linalg.norm(a))
    return a / norm if norm > 0 else a


def number_mismatch(claim: str, passage: str) -> bool:
    """True when the claim states numbers, the passage states numbers, and none of the claim's is among them."""
    mine = {n.replace(",", "") for n in _NUMBER_RE.findall(claim)}
    theirs = {n.replace(",", "") for n in _NUMBER_RE.findall(passage)}
    return bool(mine) and bool(theirs) and not (mine & theirs)


def negation_mismatch(claim: str, passage: str) -> bool:
    """True when exactly one of the claim and the passage contains a negation word (not, no, never, n't ...)."""
    return bool(_NEGATION_RE.search(claim)) != bool(_NEGATION_RE.search(passage))


def passage_cues(claim: str, passage: str) -> list[str]:
    """The refutation cues one passage shows against the claim, as words (``"numbers differ"``, ``"negation differs"``)."""
    found = []
    if number_mismatch(claim, passage):
        found.append("numbers differ")
    if negation_mismatch(claim, passage):
        found.append("negation differs")
    return found


def _cosines(s: ClaimSignals) -> list[float]:
    values = np.asarray(s.cosines or [0.0], dtype=float)
    return [float(values.max()), float(values.mean())]


def _cues(s: ClaimSignals) -> list[float]:
    texts = list(s.texts)
    if not texts:
        return [0.0, 0.0]
    return [
        float(np.mean([number_mismatch(s.claim, t) for t in texts])),
        float(np.mean([negation_mismatch(s.claim, t) for t in texts])),
    ]


def _claim(s: ClaimSignals) -> list[float]:
    return _unit(s.embedding).tolist()


@dataclass(frozen=True)
class FeatureGroup:
    """One registered feature group: its column names (``width`` columns for a vector) and how it is computed."""

    names: tuple[str, ...]
    compute: Callable[[ClaimSignals], list[float]]
    vector: bool = False

    def columns(self, width: int) -> list[str]:
        """Its column names; a vector group's are ``name_0 … name_{width-1}``."""
        return [f"{self.names[0]}_{i}" for i in range(width)] if self.vector else list(self.names)


#: The feature registry: group name -> its columns and how they are computed.
FEATURE_GROUPS: dict[str, FeatureGroup] = {
    "cosines": FeatureGroup(("cosine_max", "cosine_mean"), _cosines),
    "cues": FeatureGroup(("number_mismatch_share", "negation_mismatch_share"), _cues),
    "claim": FeatureGroup(("claim_embedding",), _claim, vector=True),
}
#: The groups the archive decision uses (declared before any report number).
DECLARED_GROUPS = ("cosines", "cues", "claim")


def _check_groups(groups: Sequence[str]) -> None:
    unknown = sorted(set(groups) - set(FEATURE_GROUPS))
    if unknown:
        raise ValueError(f"Unknown feature groups {unknown}; known: {sorted(FEATURE_GROUPS)}.")
    if not groups:
        raise ValueError("At least one feature group is needed.")


def feature_names(groups: Sequence[str], embedding_dim: int) -> list[str]:
    """The column names of :func:`archive_features` for ``groups`` (vector groups ``embedding_dim`` wide)."""
    _check_groups(groups)
    return [n for g in groups for n in FEATURE_GROUPS[g].columns(embedding_dim)]


def archive_features(signals: Sequence[ClaimSignals], groups: Sequence[str] = DECLARED_GROUPS) -> np.ndarray:
    """The feature matrix of ``signals``, shape ``(n_claims, n_features)``.

    Raises ``ValueError`` when the claims' embeddings differ in size (two encoders mixed).
    """
    _check_groups(groups)
    dims = {len(s.embedding) for s in signals}
    if len(dims) > 1:
        raise ValueError(f"The claims' embeddings have different sizes {sorted(dims)}: one encoder for all.")
    rows = [[v for g in groups for v in FEATURE_GROUPS[g].compute(s)] for s in signals]
    width = len(feature_names(groups, dims.pop())) if dims else 0
    return np.asarray(rows, dtype=float).reshape(len(rows), width)
