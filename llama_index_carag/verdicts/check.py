"""One claim check: :class:`ClaimChecker` and the :class:`CheckResult` it gives.

The check: the claim checked and embedded once, its SOI and evidence from one pass, then the verdict.

:class:`ClaimChecker` is the one path from a claim to a :class:`CheckResult`;
``carag check``, ``carag serve``, the chat bot and :func:`check_claim` all use it.  It is split in two steps
so that a server can run them under different limits and stream between them:

1. :meth:`ClaimChecker.retrieve` — validates the claim, embeds it once and asks the retriever for its
   SOI and evidence from ONE SOI computation (:meth:`ContextAwareRetriever.retrieve_with_soi`), and, when
   that SOI is empty, why (:func:`~llama_index_carag.retrieval.soi_reason.empty_reason`, with the same vector);
2. :meth:`ClaimChecker.verdict` (or :meth:`ClaimChecker.stream`) — the synthesizer's verdict on that
   evidence.  The claim goes with its vector, and each passage with its provenance, so a decision that
   needs claim-passage cosines reads the retriever's (``claim_similarity``) instead of embedding again.

:meth:`ClaimChecker.result` turns the two into the JSON result: the :class:`~llama_index_carag.verdicts.Verdict`
as it is, one row per evidence node (its stance, if the synthesizer scored one, from the verdict's ``passage_stances``), and the
SOI with ``empty_reason`` (``None`` when it holds items).

The result — retrieval, SOI and (optionally) a verdict — is one versioned JSON schema.

``carag check --json`` and the HTTP API of ``carag serve`` both emit
:class:`CheckResult`; :data:`CHECK_SCHEMA_VERSION` changes whenever a field is
removed or changes meaning (new optional fields keep the version).  The JSON
Schema is :func:`check_result_json_schema` (also served at
``GET /v1/schema/check-result``).  Its ``settings`` are the retriever's whole
:class:`~llama_index_carag.settings.CaragSettings` (its JSON form), so a result says how to
reproduce it: ``CaragSettings.model_validate(result["settings"])``.

The verdict is the :class:`~llama_index_carag.verdicts.types.Verdict` itself, and each evidence row is read
from its node (:meth:`EvidenceRow.from_node`: the ``carag`` provenance, and the passage's stance when the
synthesizer put one there).

A check that fails for a known reason answers the one error shape, :func:`error_body`
(``{"error": {"code", "message"}}``): :func:`failure_body` of a :class:`CheckFailed` (``carag serve``'s
errors are ones, and :func:`claim_rejection`'s ``invalid_claim`` for a claim no check takes).
The batch and text loops (:mod:`~llama_index_carag.verdicts.bulk`)
and the HTTP API all use it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from llama_index.core.base.response.schema import RESPONSE_TYPE, Response, StreamingResponse
from llama_index.core.bridge.pydantic import BaseModel, Field
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_carag.core.soi import SubsetOfInterest
from llama_index_carag.core.validation import check_query_text
from llama_index_carag.ranking.stage import CARAG_METADATA_KEY
from llama_index_carag.retrieval.query_plan import embedding_strs
from llama_index_carag.retrieval.soi_reason import REASON_KEY, EmptySOIReason, empty_reason
from llama_index_carag.settings import CaragSettings
from llama_index_carag.verdicts.excerpts import shown_excerpt
from llama_index_carag.verdicts.types import VERDICT_KEY, PassageStance, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever

logger = logging.getLogger(__name__)

#: Version of the :class:`CheckResult` layout (bumped when a field is removed or changes meaning).
#: 2: ``settings`` is the full :class:`CaragSettings` (was ``mode``, ``alpha``, ``delta``, ``k``).
#: 3: the archive decision's refutation cues are gone (``evidence[].cues``, ``verdict.passage_cues``).
CHECK_SCHEMA_VERSION = 3


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
        "NOT_ENOUGH_INFO = neither), from the verifier; None when it was not scored",
    )
    stance_score: float | None = Field(default=None, description="probability (0-1) of that stance")
    stance_probabilities: dict[str, float] | None = Field(
        default=None, description="the probability of each label (SUPPORTED, REFUTED, NOT_ENOUGH_INFO) for this passage"
    )
    stance_excerpt: str | None = Field(
        default=None,
        description="for a passage longer than one of the verifier's chunks, the chunk (whole sentences) its "
        "stance was read from, as it stands in text (without a metadata header); None when it was read whole or "
        "not scored",
    )

    @classmethod
    def from_node(cls, rank: int, hit: NodeWithScore, stance: PassageStance | None = None) -> EvidenceRow:
        """The row of the ``rank``-th node: its provenance, and its passage's ``stance`` (if scored)."""
        return cls(
            rank=rank,
            id=hit.node.node_id,
            score=None if hit.score is None else float(hit.score),
            text=hit.node.get_content(),
            carag=dict(hit.node.metadata.get(CARAG_METADATA_KEY) or {}),
            stance=None if stance is None else stance.stance.value,
            stance_score=None if stance is None else stance.score,
            stance_probabilities=dict(stance.probabilities) if stance is not None and stance.probabilities else None,
            stance_excerpt=None if stance is None else shown_excerpt(hit.node.get_content(), stance.excerpt),
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


class VerdictSynthesizer(Protocol):
    """What gives verdicts: a :class:`~llama_index_carag.verdicts.synthesizer.FactCheckSynthesizer`, or a
    stand-in with its ``synthesize`` (the server's ``RemoteSynthesizer``); ``metadata["verdict"]`` holds the
    :class:`Verdict`, and ``source_nodes`` the evidence (with each passage's stance, when scored)."""

    def synthesize(self, query: QueryBundle, nodes: list[NodeWithScore]) -> RESPONSE_TYPE: ...


@dataclass(frozen=True)
class Retrieved:
    """The retrieval half of a check.

    Attributes:
        claim: the claim as received.
        bundle: the claim with its embedding (computed once).
        soi: its Subset of Interest.
        nodes: the evidence, best first, each with its ``carag`` provenance.
        settings: the retriever's settings.
        empty_reason: why ``soi`` is empty (``None`` when it holds items).
    """

    claim: str
    bundle: QueryBundle
    soi: SubsetOfInterest
    nodes: list[NodeWithScore]
    settings: CaragSettings
    empty_reason: EmptySOIReason | None = None


@dataclass(frozen=True)
class ClaimChecker:
    """Checks claims with one retriever and (optionally) a synthesizer.

    Args:
        retriever: a fitted :class:`~llama_index_carag.retrieval.retriever.ContextAwareRetriever`.
        synthesizer: gives verdicts (``None``: retrieval only, the result's ``verdict`` is null).
        stream_synthesizer: a streaming one for :meth:`stream` (``carag serve``'s ``/v1/check/stream``).
    """

    retriever: ContextAwareRetriever
    synthesizer: VerdictSynthesizer | None = None
    stream_synthesizer: VerdictSynthesizer | None = None

    def retrieve(self, claim: str) -> Retrieved:
        """Embed ``claim`` once and retrieve its SOI and evidence (one SOI computation); an empty SOI with its reason.

        Raises:
            TypeError, ValueError: ``claim`` is not a non-empty string.
        """
        check_query_text(claim, "claim")
        bundle = QueryBundle(claim)
        bundle.embedding = self.retriever.embed_model.get_agg_embedding_from_queries(embedding_strs(bundle))
        soi, nodes = self.retriever.retrieve_with_soi(bundle)
        return Retrieved(claim, bundle, soi, list(nodes), self.retriever.settings, self._empty_reason(soi, bundle))

    def _empty_reason(self, soi: SubsetOfInterest, bundle: QueryBundle) -> EmptySOIReason | None:
        """Why ``soi`` is empty, with the closest item; without it if looking it up fails (it only explains)."""
        try:
            return empty_reason(self.retriever, soi, bundle.query_str, bundle.embedding)
        except Exception:
            logger.warning("could not look up the closest item of an empty SOI", exc_info=True)
            return EmptySOIReason.of(soi, dense_only=self.retriever.settings.rerank_candidates is None)

    def verdict(self, retrieved: Retrieved) -> Response:
        """The synthesizer's ``Response`` on the evidence (``metadata["verdict"]``: the :class:`Verdict`)."""
        if self.synthesizer is None:
            raise ValueError("This ClaimChecker has no synthesizer: it checks without verdicts.")
        with _claims_own_failures():
            response = self.synthesizer.synthesize(retrieved.bundle, retrieved.nodes)
        if not isinstance(response, Response):
            raise TypeError(f"The synthesizer answered a {type(response).__name__}, not a Response; use stream().")
        return response

    def stream(self, retrieved: Retrieved) -> StreamingResponse:
        """The streaming synthesizer's response: ``response_gen`` yields the model's text; when it ends,
        ``metadata["verdict"]`` holds the verdict (pass the response to :meth:`result`)."""
        if self.stream_synthesizer is None:
            raise ValueError("This ClaimChecker has no stream_synthesizer.")
        with _claims_own_failures():
            response = self.stream_synthesizer.synthesize(retrieved.bundle, retrieved.nodes)
        if not isinstance(response, StreamingResponse):
            raise TypeError(f"The stream synthesizer answered a {type(response).__name__}, not a StreamingResponse.")
        return response

    @staticmethod
    def result(retrieved: Retrieved, response: Any = None) -> CheckResult:
        """The :class:`CheckResult` of ``retrieved`` and the synthesizer's ``response`` (``None``: no verdict).

        One evidence row per retrieved node, in order, each with its passage's stance from the verdict's
        ``passage_stances`` (matched by node id), when the verifier scored it.
        """
        verdict: Verdict | None = None if response is None else (response.metadata or {}).get(VERDICT_KEY)
        stances = {st.id: st for st in (verdict.passage_stances or [])} if verdict is not None else {}
        reason = retrieved.empty_reason or EmptySOIReason.of(
            retrieved.soi, dense_only=retrieved.settings.rerank_candidates is None
        )
        return CheckResult(
            claim=retrieved.claim,
            verdict=verdict,
            settings=retrieved.settings,
            soi={**retrieved.soi.to_dict(), REASON_KEY: None if reason is None else reason.to_dict()},
            evidence=[
                EvidenceRow.from_node(rank, hit, stances.get(hit.node.node_id))
                for rank, hit in enumerate(retrieved.nodes, start=1)
            ],
        )

    def check(self, claim: str) -> CheckResult:
        """Retrieve the evidence for ``claim`` and, with a synthesizer, add its verdict."""
        retrieved = self.retrieve(claim)
        return self.result(retrieved, None if self.synthesizer is None else self.verdict(retrieved))


def check_claim(
    retriever: ContextAwareRetriever, claim: str, synthesizer: VerdictSynthesizer | None = None
) -> CheckResult:
    """Retrieve evidence for ``claim`` and, with a ``FactCheckSynthesizer``, add its verdict (one :class:`ClaimChecker`)."""
    return ClaimChecker(retriever, synthesizer).check(claim)


# --- a check that failed: the one error shape ------------------------------------------------------


class CheckFailed(Exception):
    """A claim check that failed for a known reason: a ``code`` for programs and a ``message`` for people.

    The server's errors are ones (``llm_error``, ``timeout``, ``invalid_request`` …:
    :class:`~llama_index_carag.serve.errors.ApiError`), so a batch or text loop reports them per claim.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@contextmanager
def _claims_own_failures() -> Iterator[None]:
    """An LLM's failure that belongs to this claim (its prompt does not fit the context window) as a
    :class:`CheckFailed` (``prompt_too_long``): a loop over claims reports it and goes on."""
    from llama_index_carag.models.backend import PromptTooLong

    try:
        yield
    except PromptTooLong as exc:
        raise CheckFailed("prompt_too_long", str(exc)) from exc


def claim_rejection(claim: Any) -> CheckFailed | None:
    """``invalid_claim`` for a claim no check takes (not a string, empty), else ``None``: what a loop over
    claims checks before it checks one.  A ``TypeError`` or ``ValueError`` raised later, by the retriever or the
    LLM, is not the claim's fault: it propagates."""
    try:
        check_query_text(claim, "claim")
    except (TypeError, ValueError) as exc:
        return CheckFailed("invalid_claim", f"{type(exc).__name__}: {exc}")
    return None


def error_body(code: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The one JSON shape of an error, ``{"error": {"code", "message", "details"?}}``: a failed claim of
    ``carag check --claims``, every error response of the HTTP API and a stream's ``error`` event."""
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return {"error": error}


def failure_body(exc: CheckFailed) -> dict[str, Any]:
    """The :func:`error_body` of a check that failed with ``exc``: its code and message."""
    return error_body(exc.code, exc.message)
