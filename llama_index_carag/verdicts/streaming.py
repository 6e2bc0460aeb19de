"""Streamed verdicts: the model's text passed through as it comes, the verdict parsed when the stream ends.

:func:`parsing_response` wraps a generator (or async generator) of text deltas in a LlamaIndex
``StreamingResponse`` (``AsyncStreamingResponse``) whose ``metadata[VERDICT_KEY]`` is set, by ``parse``,
once the last delta was read; :func:`fixed_stream` streams a verdict known in advance.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from typing import Any

from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
from llama_index.core.schema import NodeWithScore

from llama_index_carag.verdicts.types import VERDICT_KEY, Verdict

logger = logging.getLogger(__name__)

__all__ = ["parsing_response", "fixed_stream"]

Parse = Callable[[str], Verdict]


def parsing_response(
    deltas: Any, source_nodes: list[NodeWithScore], metadata: dict[str, Any], parse: Parse
) -> StreamingResponse | AsyncStreamingResponse | None:
    """The streaming response over ``deltas``; ``None`` when ``deltas`` is not a generator."""
    if isinstance(deltas, Generator):
        response = StreamingResponse(iter(()), source_nodes=source_nodes, metadata=metadata)  # type: ignore[arg-type]  # replaced below
        response.response_gen = _parsing(deltas, response, parse)
        return response
    if isinstance(deltas, AsyncGenerator):
        aresponse = AsyncStreamingResponse(None, source_nodes=source_nodes, metadata=metadata)  # type: ignore[arg-type]
        aresponse.response_gen = _aparsing(deltas, aresponse, parse)
        return aresponse
    return None


def _parsing(
    deltas: Generator[str, None, None], response: StreamingResponse, parse: Parse
) -> Generator[str, None, None]:
    parts: list[str] = []
    for delta in deltas:
        parts.append(delta)
        yield delta
    response.metadata = {**(response.metadata or {}), VERDICT_KEY: parse("".join(parts))}


async def _aparsing(
    deltas: AsyncGenerator[str, None], response: AsyncStreamingResponse, parse: Parse
) -> AsyncGenerator[str, None]:
    parts: list[str] = []
    async for delta in deltas:
        parts.append(delta)
        yield delta
    response.metadata = {**(response.metadata or {}), VERDICT_KEY: parse("".join(parts))}


def fixed_stream(
    verdict: Verdict, sources: Sequence[NodeWithScore], use_async: bool
) -> StreamingResponse | AsyncStreamingResponse:
    """A stream of ``verdict``'s explanation alone (no LLM call), the verdict already in its metadata."""
    if use_async:

        async def one() -> AsyncGenerator[str, None]:
            yield verdict.explanation

        return AsyncStreamingResponse(one(), source_nodes=list(sources), metadata={VERDICT_KEY: verdict})
    return StreamingResponse(
        (t for t in [verdict.explanation]), source_nodes=list(sources), metadata={VERDICT_KEY: verdict}
    )
