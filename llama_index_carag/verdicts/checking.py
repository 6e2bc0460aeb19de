"""One claim check — retrieval, SOI and (optionally) a verdict — as one versioned JSON schema.

``carag check --json`` and the HTTP API of ``carag serve`` both emit
:class:`CheckResult`; :data:`CHECK_SCHEMA_VERSION` changes whenever a field is
removed or changes meaning (new optional fields keep the version).  The JSON
Schema is :func:`check_result_json_schema` (also served at
``GET /v1/schema/check-result``).  Its ``settings`` are the retriever's whole
:class:`~llama_index_carag.settings.CaragSettings` (its JSON form), so a result says how to
reproduce it: ``CaragSettings.model_validate(result["settings"])``.

The work is split in two steps so that a server can run them under different
limits and stream between them: :func:`retrieve_claim` (embedding, SOI,
evidence) and :func:`verdict_dict` on the synthesizer's answer;
:func:`check_claim` does both.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field

from llama_index_carag.core.provenance import CARAG_METADATA_KEY
from llama_index_carag.settings import CaragSettings

logger = logging.getLogger(__name__)

__all__ = [
    "CHECK_SCHEMA_VERSION",
    "CheckResult",
    "EvidenceRow",
    "VerdictPayload",
    "Retrieved",
    "retrieve_claim",
    "evidence_rows",
    "verdict_dict",
    "check_claim",
    "check_result_json_schema",
]

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
        "NOT_ENOUGH_INFO = neither), from the stance decision; None when it was not scored",
    )
    stance_score: float | None = Field(default=None, description="calibrated probability (0-1) of that stance")


class VerdictPayload(BaseModel):
    """The verdict as JSON (the fields of :class:`~llama_index_carag.verdicts.Verdict`; extra fields pass through)."""

    model_config = ConfigDict(extra="allow")

    label: str = Field(description="SUPPORTED, REFUTED or NOT_ENOUGH_INFO")
    explanation: str = Field(description="at most two sentences")
    evidence_ids: list[str] = Field(default_factory=list, description="cited passages, in first-mention order")
    parsed: bool = Field(default=True, description="False when no label was found and NOT_ENOUGH_INFO is a fallback")
    decision: str | None = Field(
        default=None, description="scored labels: the decision that picked the label (stance, argmax or rule)"
    )
    decision_passages: list[int] = Field(
        default_factory=list, description="1-based ranks of the passages the label rests on (stance decision)"
    )
    passage_stances: list[dict[str, Any]] | None = Field(
        default=None,
        description="per passage: number (rank), id, stance, score (calibrated probability), "
        "probabilities and raw logprobs per label; None when the stance decision did not run",
    )


class CheckResult(BaseModel):
    """The result of checking one claim (``carag check --json``, ``POST /v1/check``)."""

    schema_version: int = Field(default=CHECK_SCHEMA_VERSION, description="layout version of this object")
    claim: str = Field(description="the claim as received")
    verdict: VerdictPayload | None = Field(description="None when no LLM was used")
    settings: CaragSettings = Field(
        description="every retrieval option the check ran with (CaragSettings as JSON; "
        "CaragSettings.model_validate(settings) rebuilds them, similarity_top_k is k)"
    )
    soi: dict[str, Any] = Field(description="the claim's Subset of Interest (SubsetOfInterest.to_dict())")
    evidence: list[EvidenceRow]

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (what ``carag check --json`` prints)."""
        return self.model_dump(mode="json")


@dataclass
class Retrieved:
    """The retrieval half of a check: the SOI and the evidence nodes (``NodeWithScore``)."""

    claim: str
    soi: Any
    nodes: list[Any]
    settings: CaragSettings

    def result(self, verdict: dict[str, Any] | None = None) -> CheckResult:
        """The :class:`CheckResult` with ``verdict`` (a dict from :func:`verdict_dict`, or None)."""
        return CheckResult(
            claim=self.claim,
            verdict=None if verdict is None else VerdictPayload.model_validate(verdict),
            settings=self.settings,
            soi=self.soi.to_dict(),
            evidence=[EvidenceRow(**row) for row in _with_stances(evidence_rows(self.nodes), verdict)],
        )


def retrieve_claim(retriever: Any, claim: str) -> Retrieved:
    """Embed ``claim`` once, build its SOI and retrieve its evidence with a ``ContextAwareRetriever``.

    Raises:
        TypeError, ValueError: ``claim`` is not a non-empty string.
    """
    from llama_index.core.schema import QueryBundle

    from llama_index_carag.core.validation import check_query_text, sanitize_text

    check_query_text(claim, "claim")
    embedding = retriever.embed_model.get_agg_embedding_from_queries([sanitize_text(claim)])
    bundle = QueryBundle(claim, embedding=embedding)  # embedded once for the SOI and the search
    soi = retriever.build_soi(bundle)
    nodes = retriever.retrieve(bundle)
    return Retrieved(claim=claim, soi=soi, nodes=list(nodes), settings=retriever.settings)


def _with_stances(rows: list[dict[str, Any]], verdict: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``rows`` with each passage's ``stance``/``stance_score`` from the verdict's ``passage_stances`` (by rank)."""
    stances = {s["number"]: s for s in ((verdict or {}).get("passage_stances") or [])}
    return [
        {**r, "stance": stances[r["rank"]]["stance"], "stance_score": stances[r["rank"]]["score"]}
        if r["rank"] in stances
        else r
        for r in rows
    ]


def evidence_rows(nodes: Sequence[Any]) -> list[dict[str, Any]]:
    """``NodeWithScore`` list -> rows of :class:`EvidenceRow` fields (rank, id, score, text, carag)."""
    rows = []
    for rank, hit in enumerate(nodes, start=1):
        rows.append(
            {
                "rank": rank,
                "id": hit.node.node_id,
                "score": None if hit.score is None else float(hit.score),
                "text": hit.node.get_content(),
                "carag": dict(hit.node.metadata.get(CARAG_METADATA_KEY, {})),
            }
        )
    return rows


def verdict_dict(verdict: Any) -> dict[str, Any]:
    """A :class:`~llama_index_carag.verdicts.Verdict` (or anything with ``model_dump``) as a JSON dict."""
    return verdict.model_dump(mode="json")


def check_claim(retriever: Any, claim: str, synthesizer: Any | None = None) -> CheckResult:
    """Retrieve evidence for ``claim`` and, with a ``FactCheckSynthesizer``, add its verdict."""
    retrieved = retrieve_claim(retriever, claim)
    verdict = None
    if synthesizer is not None:
        response = synthesizer.synthesize(claim, retrieved.nodes)
        verdict = verdict_dict(response.metadata["verdict"])
    return retrieved.result(verdict)


def check_result_json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`CheckResult`."""
    return CheckResult.model_json_schema()
