"""Server-Sent Events: the wire format of the streamed endpoints, and the response that counts as one request."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi.responses import StreamingResponse

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.serve.engine import CheckEngine

logger = logging.getLogger(__name__)

#: What a streamed endpoint produces: ``(event name, JSON data)`` pairs.
Events = AsyncIterator[tuple[str, dict[str, Any]]]


def sse_event(event: str, data: dict[str, Any]) -> str:
    """One event: ``event: NAME``, one ``data: JSON`` line (non-ASCII kept), a blank line."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def sse_response(events: Events, engine: CheckEngine) -> StreamingResponse:
    """``text/event-stream`` of ``events``, counted as one admitted request of ``engine`` while it runs.

    The caller checks admission (503 ``busy``) before, while a status can still be sent.
    """

    async def body() -> AsyncIterator[str]:
        async with engine.admitted(check=False):
            async for event, data in events:
                yield sse_event(event, data)

    return StreamingResponse(
        body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
