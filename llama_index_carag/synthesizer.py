"""A response synthesizer that turns a claim and its evidence into a verdict.

:class:`FactCheckSynthesizer` is a LlamaIndex ``BaseSynthesizer``: it drops
into ``RetrieverQueryEngine`` and anything else that takes a
``response_synthesizer``.  One LLM call per claim: the claim and the numbered
evidence (with ids) go into :data:`~llama_index_carag.prompts.FACT_CHECK_PROMPT_SEL`;
the answer is parsed by :func:`~llama_index_carag.verdict.parse_verdict`.

* ``Response.response`` — the explanation (at most two sentences);
* ``Response.metadata["verdict"]`` — the :class:`~llama_index_carag.verdict.Verdict`
  (label, explanation, cited evidence ids, raw text);
* ``Response.source_nodes`` — the evidence, with its ``carag`` provenance.

Streaming yields the model's text as it is generated; when the stream ends,
``response.metadata["verdict"]`` holds the parsed verdict.
"""

from __future__ import annotations

import logging
from typing import Any, AsyncGenerator, Generator, List, Optional, Sequence

from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.response_synthesizers.base import BaseSynthesizer, QueryTextType
from llama_index.core.schema import NodeWithScore
from llama_index.core.types import RESPONSE_TEXT_TYPE

from llama_index_carag.prompts import FACT_CHECK_PROMPT_SEL, fence, format_evidence
from llama_index_carag.verdict import Verdict, VerdictLabel, parse_verdict

logger = logging.getLogger(__name__)

__all__ = ["FactCheckSynthesizer", "get_fact_check_synthesizer", "VERDICT_KEY"]

#: Key of the parsed verdict in ``Response.metadata``.
VERDICT_KEY = "verdict"
#: Explanation given when the retriever found no evidence (the LLM is not called).
NO_EVIDENCE_EXPLANATION = "No evidence was retrieved for this claim, so it cannot be verified."


class FactCheckSynthesizer(BaseSynthesizer):
    """Verdict + two-sentence explanation from the claim and its top-k evidence.

    Args:
        llm: any LlamaIndex LLM (default: ``Settings.llm``).
        fact_check_template: prompt with ``query_str`` (claim) and ``context_str``
            (numbered evidence); default picks a chat or completion variant.
        streaming: return a ``StreamingResponse``.
        max_sentences: explanation length cap.
        show_ids: show node ids beside the passage numbers in the prompt.
    """

    def __init__(
        self,
        llm: LLM | None = None,
        *,
        fact_check_template: BasePromptTemplate | None = None,
        streaming: bool = False,
        max_sentences: int = 2,
        show_ids: bool = True,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        super().__init__(llm=llm, callback_manager=callback_manager, streaming=streaming)
        self._template = fact_check_template or FACT_CHECK_PROMPT_SEL
        if max_sentences < 1:
            raise ValueError("max_sentences must be >= 1.")
        self._max_sentences = max_sentences
        self._show_ids = show_ids

    # ----------------------------------------------------------------- prompts
    def _get_prompts(self) -> PromptDictType:
        return {"fact_check_template": self._template}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "fact_check_template" in prompts:
            self._template = prompts["fact_check_template"]

    # ---------------------------------------------------------------- helpers
    def _context(self, text_chunks: Sequence[str], evidence_ids: Sequence[str] | None) -> str:
        ids = list(evidence_ids) if (self._show_ids and evidence_ids is not None) else None
        if ids is not None and len(ids) != len(text_chunks):
            ids = None
        return format_evidence(list(text_chunks), ids)

    def parse(self, text: str, evidence_ids: Sequence[str] | None = None) -> Verdict:
        """Parse an LLM answer into a :class:`Verdict` (citations mapped to ``evidence_ids``)."""
        return parse_verdict(text, evidence_ids=evidence_ids, max_sentences=self._max_sentences)

    # --------------------------------------------------------------- LLM call
    def get_response(
        self,
        query_str: str,
        text_chunks: Sequence[str],
        evidence_ids: Sequence[str] | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TEXT_TYPE:
        """The LLM's raw answer (a string, or a generator of text deltas when streaming)."""
        context = self._context(text_chunks, evidence_ids)
        if self._streaming:
            return self._llm.stream(self._template, query_str=fence(query_str), context_str=context)
        return self._llm.predict(self._template, query_str=fence(query_str), context_str=context)

    async def aget_response(
        self,
        query_str: str,
        text_chunks: Sequence[str],
        evidence_ids: Sequence[str] | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TEXT_TYPE:
        context = self._context(text_chunks, evidence_ids)
        if self._streaming:
            return await self._llm.astream(self._template, query_str=fence(query_str), context_str=context)
        return await self._llm.apredict(self._template, query_str=fence(query_str), context_str=context)

    # ------------------------------------------------------------ synthesize
    def synthesize(
        self,
        query: QueryTextType,
        nodes: List[NodeWithScore],
        additional_source_nodes: Optional[Sequence[NodeWithScore]] = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        """Run the LLM on the claim and ``nodes`` (numbered in order) and attach the verdict.

        With no evidence the LLM is not called: the verdict is NOT_ENOUGH_INFO.
        """
        if not nodes:
            return self._no_evidence(additional_source_nodes)
        response_kwargs.setdefault("evidence_ids", [n.node.node_id for n in nodes])
        return super().synthesize(query, _hide_labels(nodes), additional_source_nodes, **response_kwargs)

    async def asynthesize(
        self,
        query: QueryTextType,
        nodes: List[NodeWithScore],
        additional_source_nodes: Optional[Sequence[NodeWithScore]] = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        if not nodes:
            return self._no_evidence(additional_source_nodes, use_async=True)
        response_kwargs.setdefault("evidence_ids", [n.node.node_id for n in nodes])
        nodes = _hide_labels(nodes)
        return await super().asynthesize(query, nodes, additional_source_nodes, **response_kwargs)

    def _no_evidence(self, additional: Optional[Sequence[NodeWithScore]], use_async: bool = False) -> RESPONSE_TYPE:
        verdict = Verdict(
            label=VerdictLabel.NOT_ENOUGH_INFO,
            explanation=NO_EVIDENCE_EXPLANATION,
            evidence_ids=[],
            raw="",
            parsed=False,
        )
        sources = list(additional or [])
        if self._streaming and use_async:

            async def one() -> AsyncGenerator[str, None]:
                yield verdict.explanation

            return AsyncStreamingResponse(one(), source_nodes=sources, metadata={VERDICT_KEY: verdict})
        if self._streaming:
            return StreamingResponse(
                (t for t in [verdict.explanation]), source_nodes=sources, metadata={VERDICT_KEY: verdict}
            )
        return Response(verdict.explanation, source_nodes=sources, metadata={VERDICT_KEY: verdict})

    def _prepare_response_output(
        self, response_str: Optional[RESPONSE_TEXT_TYPE], source_nodes: List[NodeWithScore]
    ) -> RESPONSE_TYPE:
        ids = [n.node.node_id for n in source_nodes]
        metadata = self._get_metadata_for_response([n.node for n in source_nodes]) or {}
        if isinstance(response_str, str):
            verdict = self.parse(response_str, ids)
            metadata[VERDICT_KEY] = verdict
            return Response(verdict.explanation, source_nodes=source_nodes, metadata=metadata)
        if isinstance(response_str, Generator):
            response = StreamingResponse(None, source_nodes=source_nodes, metadata=metadata)
            response.response_gen = self._parsing_stream(response_str, response, ids)
            return response
        if isinstance(response_str, AsyncGenerator):
            aresponse = AsyncStreamingResponse(None, source_nodes=source_nodes, metadata=metadata)  # type: ignore[arg-type]
            aresponse.response_gen = self._aparsing_stream(response_str, aresponse, ids)
            return aresponse
        return super()._prepare_response_output(response_str, source_nodes)

    def _parsing_stream(
        self, deltas: Generator[str, None, None], response: StreamingResponse, ids: list[str]
    ) -> Generator[str, None, None]:
        parts: list[str] = []
        for delta in deltas:
            parts.append(delta)
            yield delta
        response.metadata = {**(response.metadata or {}), VERDICT_KEY: self.parse("".join(parts), ids)}

    async def _aparsing_stream(
        self, deltas: AsyncGenerator[str, None], response: AsyncStreamingResponse, ids: list[str]
    ) -> AsyncGenerator[str, None]:
        parts: list[str] = []
        async for delta in deltas:
            parts.append(delta)
            yield delta
        response.metadata = {**(response.metadata or {}), VERDICT_KEY: self.parse("".join(parts), ids)}


def _hide_labels(nodes: Sequence[NodeWithScore]) -> List[NodeWithScore]:
    """Copies of ``nodes`` whose annotation keys (theme, claim id, label, …) never reach the LLM,
    whatever their own exclusion lists say: a gold label in the prompt would decide the verdict."""
    from llama_index_carag.datasets import LABEL_METADATA_KEYS

    hidden = [*LABEL_METADATA_KEYS, "carag"]
    out = []
    for n in nodes:
        missing = [k for k in hidden if k in n.node.metadata and k not in n.node.excluded_llm_metadata_keys]
        if missing:
            node = n.node.model_copy(update={"excluded_llm_metadata_keys": [*n.node.excluded_llm_metadata_keys, *missing]})
            out.append(NodeWithScore(node=node, score=n.score))
        else:
            out.append(n)
    return out


def get_fact_check_synthesizer(
    llm: LLM | str | None = None,
    streaming: bool = False,
    *,
    fact_check_template: BasePromptTemplate | None = None,
    max_sentences: int = 2,
    callback_manager: CallbackManager | None = None,
) -> FactCheckSynthesizer:
    """Build a :class:`FactCheckSynthesizer`.

    Args:
        llm: a LlamaIndex LLM, a Hugging Face id/path, or ``None`` for the offline
            default (SmolLM2-135M-Instruct: shows the pipeline, verdicts not reliable).
        streaming: stream the model's text.
        fact_check_template: prompt override (``query_str``, ``context_str``).
        max_sentences: explanation cap (papers: two sentences).
    """
    from llama_index_carag.models import resolve_llm

    return FactCheckSynthesizer(
        resolve_llm(llm),
        fact_check_template=fact_check_template,
        streaming=streaming,
        max_sentences=max_sentences,
        callback_manager=callback_manager,
    )
