"""One claim check — retrieval, SOI and (optionally) a verdict — as one versioned JSON schema.

``carag check --json`` and the HTTP API of ``carag serve`` both emit
:class:`CheckResult`; :data:`CHECK_SCHEMA_VERSION` changes whenever a field is
removed or changes meaning (new optional fields keep the version).  The JSON
Schema is :func:`check_result_json_schema` (also served at
``GET /v1/schema/check-result``).  Its ``settings`` are the retriever's whole
:class:`~llama_index_carag.settings.CaragSettings` (its JSON form), so a result says how to
reproduce it: ``CaragSettings.model_validate(result["settings"])``.

The verdict is the :class:`~llama_index_carag.verdicts.types.Verdict` itself, and each evidence row is read
from its node (:meth:`EvidenceRow.from_node`: the ``carag`` provenance, and the passage's stance when the
synthesizer put one there).  The check that fills it is :mod:`llama_index_carag.verdicts.checker`.
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index.core.bridge.pydantic import BaseModel, Field
from llama_index.core.schema import NodeWithScore

from llama_index_carag.core.provenance import CARAG_METADATA_KEY
from llama_index_carag.settings import CaragSettings
from llama_index_carag.verdicts.scored import CUES_KEY, STANCE_KEYS
from llama_index_carag.verdicts.types import Verdict

logger = logging.getLogger(__name__)

__all__ = ["CHECK_SCHEMA_VERSION", "CheckResult", "EvidenceRow", "check_result_json_schema"]

#: Version of the :class:`CheckResult` layout (bumped when a field is removed or changes meaning).
#: 2: ``settings`` is the full :class:`CaragSettings` (was ``mode``, ``alpha``, ``delta``, ``k``).
CHECK_SCHEMA_VERSION = 2


class EvidenceRow(BaseModel):
    """One retrieved passage, best first."""

    rank: int = Field(description="1-based rank")
    id: str = Field(description="node id of the passage")
    score: float | None = Field(description="retrieval score (None when the retriever gave none)")
    text: str = Field(description="the passage text, as stored")
    carag: dict[str, Any] = Field(
        default_factory=dict,
        description="provenance from node.metadata['carag']: cluster, claim/thematic similarity, in_soi, ...",
    )
    stance: str | None = Field(
        default=None,
        description="the passage's own stance towards the claim (SUPPORTED, REFUTED or "
        "NOT_ENOUGH_INFO = neither), from the verifier (or the LLM's stance decision); None when it was not scored",
    )
    stance_score: float | None = Field(default=None, description="probability (0-1) of that stance")
    stance_probabilities: dict[str, float] | None = Field(
        default=None, description="the probability of each label (SUPPORTED, REFUTED, NOT_ENOUGH_INFO) for this passage"
    )
    cues: list[str] | None = Field(
        default=None,
        description="the refutation cues the archive decision read in this passage against the claim "
        "(numbers differ, negation differs; empty: none); None when that decision did not run",
    )

    @classmethod
    def from_node(cls, rank: int, hit: NodeWithScore) -> EvidenceRow:
        """The row of the ``rank``-th node: its provenance, with the stance (if any) in its own fields."""
        carag = dict(hit.node.metadata.get(CARAG_METADATA_KEY) or {})
        stance, stance_score, probabilities = (carag.pop(key, None) for key in STANCE_KEYS)
        cues = carag.pop(CUES_KEY, None)
        return cls(
            rank=rank,
            id=hit.node.node_id,
            score=None if hit.score is None else float(hit.score),
            text=hit.node.get_content(),
            carag=carag,
            stance=stance,
            stance_score=stance_score,
            stance_probabilities=probabilities,
            cues=cues,
        )


class CheckResult(BaseModel):
    """The result of checking one claim (``carag check --json``, ``POST /v1/check``)."""

    schema_version: int = Field(default=CHECK_SCHEMA_VERSION, description="layout version of this object")
    claim: str = Field(description="the claim as received")
    verdict: Verdict | None = Field(description="None when no LLM was used")
    settings: CaragSettings = Field(
        description="every retrieval option the check ran with (CaragSettings as JSON; "
        "CaragSettings.model_validate(settings) rebuilds them, similarity_top_k is k)"
    )
    soi: dict[str, Any] = Field(
        description="the claim's Subset of Interest (SubsetOfInterest.to_dict()) and empty_reason: why it is "
        "empty (text, delta, cluster_size, closest_id, closest_similarity), null when it holds items"
    )
    evidence: list[EvidenceRow]

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (what ``carag check --json`` prints)."""
        return self.model_dump(mode="json")


def check_result_json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`CheckResult`."""
    return CheckResult.model_json_schema()
