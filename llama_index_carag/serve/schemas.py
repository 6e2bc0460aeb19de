"""Request and response bodies of the HTTP API (the check result itself is :mod:`llama_index_carag.verdicts.check`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from llama_index_carag.verdicts.check import EvidenceRow
from llama_index_carag.verdicts.types import Verdict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClaimRequest(_Strict):
    """``POST /v1/check``, ``/v1/check/stream``, ``/v1/graph``."""

    claim: str = Field(description="the claim to check (non-empty, at most max_claim_chars)")


class TextRequest(_Strict):
    """``POST /v1/check-text``."""

    text: str = Field(description="an article, transcript or post (non-empty, at most max_text_chars)")


class BatchRequest(_Strict):
    """``POST /v1/check-batch``: the items are checked one by one, so a bad one is reported, not fatal."""

    claims: list[Any] = Field(
        description="the claims, each a non-empty string of at most max_claim_chars (1 to max_batch_claims items)"
    )


class MessageRequest(_Strict):
    """``POST /v1/sessions/{id}/messages``."""

    message: str = Field(description="a claim or a follow-up question (non-empty, at most max_message_chars)")


class SessionInfo(BaseModel):
    """``POST /v1/sessions``."""

    session_id: str
    max_turns: int
    ttl_s: float


class ChatTurnOut(BaseModel):
    """One answered message of a chat session."""

    turn: int = Field(description="1-based turn number")
    message: str
    verdict: Verdict
    evidence: list[EvidenceRow]
    text: str = Field(description="the model's full answer")


class SessionOut(BaseModel):
    """``GET /v1/sessions/{id}``."""

    session_id: str
    turns: list[ChatTurnOut]


class GraphOut(BaseModel):
    """``POST /v1/graph``: the SOI and its Plotly figure (text already HTML-escaped by ``visualize``)."""

    soi: dict[str, Any]
    figure: dict[str, Any] = Field(description="Plotly figure JSON: {data, layout}")


class InfoOut(BaseModel):
    """``GET /v1/info``."""

    version: str
    schema_version: int
    mode: str
    k: int
    n_items: int
    llm: str | None = Field(description="the LLM's model name, or None when verdicts are off")
    limits: dict[str, Any]
    llm_state: dict[str, Any] | None = Field(
        None,
        description='the LLM worker processes: {"workers": [{"pid", "state": "ready|starting|dead", '
        '"restarts", "busy"}]}; None when the LLM runs in the server process',
    )
    index: dict[str, Any] | None = Field(
        None,
        description='the copy of the index served: {"folder", "loaded_at" (UTC, ISO 8601), "reloads" (0: the copy '
        'loaded at start), "reload_interval_s" (None: no reload), "reloading", "behind" (what another writer '
        'changed since, as last seen), "last_error" (of the last reload, if it failed)}',
    )
