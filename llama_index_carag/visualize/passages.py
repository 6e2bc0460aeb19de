"""The retrieved passages as the SOI graph reads them: id, text, rank, cosine to the claim and stance.

A check's evidence comes in three forms, all read here and nowhere else:

* ``NodeWithScore`` from the retriever or from a verdict's ``Response.source_nodes`` — the
  provenance in ``node.metadata["carag"]`` (``claim_similarity``, and after the verifier
  ``stance`` / ``stance_score``);
* :class:`~llama_index_carag.verdicts.check.EvidenceRow` objects;
* their JSON dicts (``CheckResult.to_json_dict()["evidence"]``, ``carag check --json``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Passage:
    """One retrieved passage.

    Attributes:
        id: node id.
        text: the passage text.
        rank: 1-based rank in the evidence.
        similarity: cosine similarity to the claim (``nan`` when the provenance does not say).
        stance: ``"SUPPORTED"``, ``"REFUTED"``, ``"NOT_ENOUGH_INFO"``, or ``None`` when not scored.
        stance_score: the probability of that stance, or ``None``.
    """

    id: str
    text: str
    rank: int
    similarity: float = math.nan
    stance: str | None = None
    stance_score: float | None = None


def read_passages(evidence: Iterable[Any]) -> list[Passage]:
    """``evidence`` (``NodeWithScore``, ``EvidenceRow`` or its dict, best first) as :class:`Passage` objects.

    Raises:
        TypeError: an element is none of the three forms.
    """
    return [_passage(hit, rank) for rank, hit in enumerate(evidence, start=1)]


def _passage(hit: Any, rank: int) -> Passage:
    """One element of the evidence; a row's own ``rank`` wins over its position."""
    if hasattr(hit, "node") and hasattr(hit.node, "node_id"):
        # Deferred: the stage imports LlamaIndex (and Pillow), which a NodeWithScore has loaded already; importing
        # the visualize package stays light.
        from llama_index_carag.ranking.stage import CARAG_METADATA_KEY

        provenance = dict(hit.node.metadata.get(CARAG_METADATA_KEY) or {})
        row: Mapping[str, Any] = {"id": hit.node.node_id, "text": hit.node.get_content(), "carag": provenance}
    elif hasattr(hit, "model_dump"):
        row = hit.model_dump()
    elif isinstance(hit, Mapping):
        row = hit
    else:
        raise TypeError(f"evidence holds NodeWithScore, EvidenceRow or dict items; got {type(hit).__name__}.")
    provenance = dict(row.get("carag") or {})
    stance = row.get("stance") or provenance.get("stance")
    score = row.get("stance_score", provenance.get("stance_score"))
    return Passage(
        id=str(row["id"]),
        text=str(row.get("text", "")),
        rank=int(row.get("rank") or rank),
        similarity=_number(provenance.get("claim_similarity")),
        stance=_stance(stance),
        stance_score=None if score is None else _number(score),
    )


def _number(value: Any) -> float:
    """``float(value)``, ``nan`` for ``None`` or anything not a number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _stance(value: Any) -> str | None:
    """A stance label (``T``/``F``/``N`` or a full name) as a :class:`VerdictLabel` value; ``None`` if unknown."""
    from llama_index_carag.verdicts.types import VerdictLabel

    if value is None:
        return None
    try:
        return VerdictLabel.from_fever(value).value
    except ValueError:
        logger.warning("Unknown stance %r; the passage is drawn as not scored.", value)
        return None
