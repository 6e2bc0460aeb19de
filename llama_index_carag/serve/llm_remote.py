"""Server-side stand-ins for the LLM and the synthesizers when they run in :class:`~.llm_pool.LLMPool` workers.

* :class:`RemoteLLM` — a LlamaIndex ``LLM`` whose ``chat``/``complete`` (and streams) run in a worker;
  the chat sessions' engines (and their memory) stay in the server and use it, so a session survives
  a restart of the model.
* :class:`RemoteSynthesizer` — ``synthesize(claim, nodes)`` like a ``FactCheckSynthesizer``: the
  worker's synthesizer runs, and the verdict comes back in ``response.metadata["verdict"]`` (the
  passages' stances, if scored, in the source nodes' provenance).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.base.response.schema import Response, StreamingResponse
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback

from llama_index_carag.serve.llm_pool import LLMPool
from llama_index_carag.verdicts.scored import with_stances
from llama_index_carag.verdicts.types import VERDICT_KEY


class RemoteLLM(CustomLLM):
    """The LLM of a started :class:`LLMPool`'s workers, as a LlamaIndex LLM in the server.

    ``metadata`` (and ``system_prompt``, ``query_wrapper_prompt``) are the workers' model's;
    ``metadata.model_name`` is its ``llm_name``.  Calls raise the pool's errors
    (:class:`~.llm_pool.LLMUnavailable` while no worker is ready).
    """

    _pool: LLMPool = PrivateAttr()

    def __init__(self, pool: LLMPool, **kwargs: Any) -> None:
        if pool.info is None:
            raise ValueError("RemoteLLM needs a started LLMPool (pool.start()).")
        kwargs.setdefault("system_prompt", pool.info.get("system_prompt"))
        kwargs.setdefault("query_wrapper_prompt", pool.info.get("query_wrapper_prompt"))
        super().__init__(**{k: v for k, v in kwargs.items() if v is not None})
        self._pool = pool

    @classmethod
    def class_name(cls) -> str:
        return "RemoteLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(**self._pool.info["metadata"])  # type: ignore[index]

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._pool.call("chat", list(messages), kwargs)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return self._pieces(self._pool.stream("stream_chat", list(messages), kwargs))

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self._pool.call("complete", prompt, formatted, kwargs)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        return self._pieces(self._pool.stream("stream_complete", prompt, formatted, kwargs))

    @staticmethod
    def _pieces(stream: Generator[Any, None, Any]) -> Generator[Any, None, None]:
        yield from stream


class RemoteSynthesizer:
    """``synthesize(claim, nodes)`` in a worker of ``pool`` (its ``FactCheckSynthesizer``).

    Args:
        pool: a started :class:`LLMPool`.
        streaming: return a ``StreamingResponse`` whose ``response_gen`` yields the model's text;
            ``metadata["verdict"]`` is set when it ends (as ``FactCheckSynthesizer(streaming=True)`` does).
    """

    def __init__(self, pool: LLMPool, streaming: bool = False) -> None:
        self.pool, self.streaming = pool, streaming

    def synthesize(self, query: Any, nodes: Sequence[Any], **_: Any) -> Response | StreamingResponse:
        claim, nodes = str(query), list(nodes)
        if self.streaming:
            response = StreamingResponse(iter(()), source_nodes=nodes, metadata={})  # type: ignore[arg-type]
            response.response_gen = self._deltas(response, claim, nodes)
            return response
        text, verdict = self.pool.call("verdict", claim, nodes)
        sources = with_stances(nodes, verdict.passage_stances)  # as the worker's synthesizer gives them
        return Response(text, source_nodes=sources, metadata={VERDICT_KEY: verdict})

    def _deltas(self, response: StreamingResponse, claim: str, nodes: list[Any]) -> Generator[str, None, None]:
        verdict = yield from self.pool.stream("stream_verdict", claim, nodes)
        response.metadata = {**(response.metadata or {}), VERDICT_KEY: verdict}
        response.source_nodes = with_stances(nodes, verdict.passage_stances)  # as an unstreamed response's
