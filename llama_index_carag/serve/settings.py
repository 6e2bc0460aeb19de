"""Limits and timeouts of ``carag serve`` (one frozen pydantic model, checked when built)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator


class ServeSettings(BaseModel):
    """Limits of the HTTP API: counts are integers >= 1, durations finite seconds > 0 (``ValueError`` otherwise)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_claim_chars: StrictInt = Field(2000, ge=1, description="longest claim accepted (characters, after trimming)")
    max_message_chars: StrictInt = Field(2000, ge=1, description="longest chat message accepted")
    max_body_bytes: StrictInt = Field(
        64 * 1024, ge=1, description="largest request body; larger bodies get 413 before they are read in full"
    )
    retrieval_workers: StrictInt = Field(4, ge=1, description="checks that embed and retrieve at the same time")
    llm_workers: StrictInt = Field(
        1,
        ge=1,
        description="LLM calls (verdicts, chat turns) at the same time; 1 suits one local model. "
        "carag serve runs one LLM worker process per call slot (each loads the model)",
    )
    max_pending: StrictInt = Field(
        256, ge=1, description="requests admitted at once (running + waiting for a worker); one more gets 503"
    )
    request_timeout_s: float = Field(
        300.0,
        gt=0,
        allow_inf_nan=False,
        description="a request still running after this many seconds gets 504 (a stream ends with an error "
        "event); its worker slot is freed, and the thread (which Python cannot stop) finishes in the background",
    )
    max_sessions: StrictInt = Field(
        100, ge=1, description="chat sessions kept at once; creating one more (after expired ones are dropped) gets 503"
    )
    session_ttl_s: float = Field(
        3600.0, gt=0, allow_inf_nan=False, description="a chat session unused this long expires"
    )
    max_turns: StrictInt = Field(50, ge=1, description="messages per chat session; one more gets 409")
    max_text_chars: StrictInt = Field(
        20_000,
        ge=1,
        description="longest text for POST /v1/check-text (characters, after trimming; about 3,000 words); "
        "a longer one gets 422. max_body_bytes bounds the request too",
    )
    max_text_claims: StrictInt = Field(
        50,
        ge=1,
        description="check-worthy claims one text may have for POST /v1/check-text; a text with more gets "
        "422 too_many_claims before any is checked",
    )
    max_batch_claims: StrictInt = Field(
        100, ge=1, description="claims in one POST /v1/check-batch; more gets 422 too_many_claims"
    )
    max_client_requests: StrictInt | None = Field(
        None,
        ge=1,
        description="POST/DELETE requests under /v1/ one client (by address) may have running at once; one more "
        "gets 429 too_many_requests; None: no per-client limit (carag serve sets one)",
    )

    reload_interval_s: float | None = Field(
        5.0,
        gt=0,
        allow_inf_nan=False,
        description="look for another process's persist (or shared docstore edit) at most this often, on "
        "requests, and load the index again when there is one; requests in flight finish on the old copy; "
        "None: never reload",
    )

    def __init__(self, **limits: Any) -> None:
        try:
            super().__init__(**limits)
        except ValidationError as exc:  # one line per bad limit (the CLI prints it as one usage error)
            raise ValueError(
                "; ".join(
                    f"ServeSettings.{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})"
                    for e in exc.errors()
                )
            ) from None

    @field_validator("request_timeout_s", "session_ttl_s", "reload_interval_s", mode="before")
    @classmethod
    def _seconds_not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("a number of seconds, not a bool")
        return value

    def public(self) -> dict[str, float | int | None]:
        """The limits as a JSON dict (``GET /v1/info``)."""
        return self.model_dump()
