"""Chat sessions of ``carag serve``: bounded in number, expired when idle, one message at a time."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llama_index_carag.serve.errors import ApiError

logger = logging.getLogger(__name__)


@dataclass
class Session:
    """One conversation: its memory (``(message, answer)`` pairs the chat bot condenses follow-ups with), its
    turns as JSON, and a lock.  It holds no bot: each turn's bot is made on the index as last loaded, so an idle
    session keeps no reloaded-away copy of the index alive."""

    id: str
    created: float
    last_used: float
    history: list[tuple[str, str]] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SessionStore:
    """At most ``max_sessions`` sessions; one unused for ``ttl_s`` (by ``clock``) is dropped.

    Args:
        max_sessions: sessions kept at once; :meth:`create` beyond it raises 503 ``too_many_sessions``.
        ttl_s: idle time after which a session expires.
        clock: seconds, monotonic (injectable so that tests need no sleeping).
    """

    def __init__(self, max_sessions: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_sessions, self.ttl_s, self.clock = max_sessions, ttl_s, clock
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        self._expire()
        return len(self._sessions)

    def _expire(self) -> None:
        now = self.clock()
        for sid in [s.id for s in self._sessions.values() if now - s.last_used > self.ttl_s and not s.lock.locked()]:
            logger.info("chat session %s expired", sid)
            del self._sessions[sid]

    def create(self) -> Session:
        """A new session."""
        self._expire()
        if len(self._sessions) >= self.max_sessions:
            raise ApiError(
                503,
                "too_many_sessions",
                f"{self.max_sessions} chat sessions are open; close one (DELETE) or retry later",
                headers={"Retry-After": "60"},
            )
        now = self.clock()
        session = Session(id=secrets.token_urlsafe(16), created=now, last_used=now)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> Session:
        """The live session ``session_id`` (its idle clock restarts); 404 ``not_found`` if unknown or expired."""
        self._expire()
        session = self._sessions.get(session_id)
        if session is None:
            raise ApiError(404, "not_found", "no such chat session (it may have expired); create a new one")
        session.last_used = self.clock()
        return session

    def delete(self, session_id: str) -> None:
        """Close a session; 404 if unknown, 409 while it is answering."""
        session = self.get(session_id)
        if session.lock.locked():
            raise ApiError(409, "session_busy", "the session is answering a message; delete it afterwards")
        del self._sessions[session_id]
