"""Limits and timeouts of ``carag serve`` (one frozen object, checked when built)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

__all__ = ["ServeSettings"]


@dataclass(frozen=True)
class ServeSettings:
    """Limits of the HTTP API.

    Attributes:
        max_claim_chars: longest claim accepted (characters, after trimming).
        max_message_chars: longest chat message accepted.
        max_body_bytes: largest request body; larger bodies get 413 before they are read in full.
        retrieval_workers: checks that embed and retrieve at the same time (threads).
        llm_workers: LLM calls (verdicts, chat turns) at the same time; 1 suits one local model.
            ``carag serve`` runs one LLM worker process per call slot (each loads the model).
        max_pending: requests admitted at once (running + waiting for a worker); one more gets 503.
        request_timeout_s: a request still running after this many seconds gets 504 (a stream
            ends with an ``error`` event); its worker slot is freed, and the thread (which Python
            cannot stop) finishes in the background.
        max_sessions: chat sessions kept at once; creating one more (after expired ones are
            dropped) gets 503.
        session_ttl_s: a chat session unused this long expires.
        max_turns: messages per chat session; one more gets 409.
    """

    max_claim_chars: int = 2000
    max_message_chars: int = 2000
    max_body_bytes: int = 64 * 1024
    retrieval_workers: int = 4
    llm_workers: int = 1
    max_pending: int = 256
    request_timeout_s: float = 300.0
    max_sessions: int = 100
    session_ttl_s: float = 3600.0
    max_turns: int = 50

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"ServeSettings.{f.name} must be an integer >= 1; got {value!r}.")
            elif (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0
            ):
                raise ValueError(f"ServeSettings.{f.name} must be a positive number of seconds; got {value!r}.")

    def public(self) -> dict[str, float | int]:
        """The limits as a JSON dict (``GET /v1/info``)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
