"""A response synthesizer that turns a claim and its evidence into a verdict.

:class:`FactCheckSynthesizer` is a LlamaIndex ``BaseSynthesizer`` (it drops into ``RetrieverQueryEngine``).  One
:class:`~llama_index_carag.verdicts.decision.LabelDecision` picks the label.  The default, the claim verifier
(:func:`~llama_index_carag.verdicts.scored.decided`, :func:`~llama_index_carag.verdicts.scored.explained`), decides before the LLM is called, with any LLM; the LLM then
explains that label (``explain_template``), shown each passage as the verifier read it (a long one as its stance's
excerpt, :func:`~llama_index_carag.verdicts.excerpts.as_read`).  With ``decision="llm"`` the LLM's own label counts, obtained by
``label_mode``: ``"score"`` for a local ``LlamaCPP``/``HuggingFaceLLM`` or a server with log-probabilities (label
strings scored, :mod:`~llama_index_carag.verdicts.scored`), ``"structured"`` for function calling
(:class:`VerdictOutput`), ``"text"`` for the rest (:func:`~llama_index_carag.verdicts.parse_verdict`).

Every explanation is checked (:mod:`~llama_index_carag.verdicts.explanation_checks`).  :meth:`verdict` gives the
:class:`~llama_index_carag.verdicts.Verdict` alone (what ``ClaimChecker`` calls); ``synthesize`` wraps it in a
``Response`` whose ``source_nodes`` carry each passage's stance in their ``carag`` provenance (streamed too).  Streaming yields
the model's text (under the verifier: the explanation of the label decided before the stream); the verdict is in
``response.metadata["verdict"]`` when the stream ends.  Options: one frozen ``VerdictSettings``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
from collections.abc import AsyncGenerator, Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import llama_index.core.instrumentation as instrument
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.bridge.pydantic import BaseModel, Field
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.callbacks.schema import CBEventType, EventPayload
from llama_index.core.instrumentation.events.synthesis import SynthesizeEndEvent, SynthesizeStartEvent
from llama_index.core.llms import LLM, MessageRole
from llama_index.core.prompts import BasePromptTemplate, SelectorPromptTemplate
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.response_synthesizers.base import BaseSynthesizer, QueryTextType
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.types import RESPONSE_TEXT_TYPE

from llama_index_carag.verdicts import Verdict, VerdictLabel, parse_verdict
from llama_index_carag.verdicts.decision import (
    LABEL_MODES,
    LabelDecision,
    VerdictSettings,
    VerifierDecision,
    resolve_decision,
    with_options,
)
from llama_index_carag.verdicts.excerpts import as_read
from llama_index_carag.verdicts.explanation_checks import checked_verdict
from llama_index_carag.verdicts.prompts import (
    EXPLAIN_CHAT_PROMPT,
    FACT_CHECK_PROMPT_SEL,
    chat_variant,
    evidence_texts,
    fence,
    format_evidence,
    hide_labels,
)
from llama_index_carag.verdicts.scored import (
    ScoredVerdicts,
    decided,
    explained,
    label_words,
    with_stances,
)
from llama_index_carag.verdicts.types import (
    UNEXPLAINED,
    VERDICT_KEY,
    label_value,
    no_evidence_verdict,
    with_answer_text,
)

logger = logging.getLogger(__name__)
dispatcher = instrument.get_dispatcher(__name__)
#: The verifier's verdict of the stream being set up (read by ``get_response`` and the stream's parser).
_STREAM_VERDICT: contextvars.ContextVar[Verdict | None] = contextvars.ContextVar("carag_stream_verdict", default=None)

__all__ = [
    "FactCheckSynthesizer",
    "get_fact_check_synthesizer",
    "VERDICT_KEY",
    "VerdictOutput",
    "LABEL_MODES",
    "VerdictSettings",
]


class VerdictOutput(BaseModel):
    """The structured-output schema of a verdict (``llm.structured_predict``)."""

    label: Literal["SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"] = Field(
        description="SUPPORTED if the evidence supports the claim, REFUTED if it contradicts it, "
        "NOT_ENOUGH_INFO if it does not settle it."
    )
    explanation: str = Field(description="At most two sentences citing passages by number like [2].")


class FactCheckSynthesizer(BaseSynthesizer):
    """Verdict + two-sentence explanation from the claim and its top-k evidence.

    Args:
        llm: any LlamaIndex LLM (default: ``Settings.llm``).
        settings: the :class:`~llama_index_carag.verdicts.decision.VerdictSettings` (default: the claim
            verifier decides, the LLM explains in at most two sentences; ``decision="llm"``: the LLM's own label).
        decision: a :class:`~llama_index_carag.verdicts.decision.LabelDecision`, or a decision's name
            (``"verifier"``, ``"llm"``; default: the one ``settings.decision`` names).
        fact_check_template: prompt with ``query_str`` (claim) and ``context_str``
            (numbered evidence); default picks a chat or completion variant.  The verifier's label is explained
            with ``explain_template`` (``query_str``, ``context_str``, ``label_str``;
            ``update_prompts({"explain_template": ...})``).
        streaming: return a ``StreamingResponse`` (always the ``"text"`` mode).
        verifier: the :class:`~llama_index_carag.verifier.model.ClaimVerifier` of the default decision (default:
            the one shipped with the package; ``carag index --calibrate`` may store an archive-adapted one).
        **options: :class:`VerdictSettings` fields (``max_sentences=1``, ``label_mode="text"``, …) applied
            over ``settings``.
    """

    def __init__(
        self,
        llm: LLM | None = None,
        *,
        settings: VerdictSettings | None = None,
        decision: LabelDecision | str | None = None,
        fact_check_template: BasePromptTemplate | None = None,
        streaming: bool = False,
        callback_manager: CallbackManager | None = None,
        verifier: Any = None,
        **options: Any,
    ) -> None:
        super().__init__(llm=llm, callback_manager=callback_manager, streaming=streaming)
        if isinstance(decision, str):  # a decision's name: a settings field
            options["decision"], decision = decision, None
        settings = with_options(settings or VerdictSettings(), options)
        self._settings = settings
        self._template = fact_check_template or FACT_CHECK_PROMPT_SEL
        self._explain_template: BasePromptTemplate = EXPLAIN_CHAT_PROMPT
        self._scorer: Any = None
        self._label_mode = self._resolve_mode(settings.label_mode, settings.max_explanation_tokens)
        self._show_ids = self._label_mode != "score" if settings.show_ids is None else bool(settings.show_ids)
        self._decision: LabelDecision | None = None
        self._scored_verdicts: ScoredVerdicts | None = None
        if self._label_mode == "score" or settings.decision == "verifier" or decision is not None:
            self._decision = decision or resolve_decision(settings, verifier)
        if self._label_mode == "score":
            assert self._decision is not None
            self._scored_verdicts = ScoredVerdicts(self._scorer, self._decision, settings, self.messages)

    def _resolve_mode(self, mode: str, max_tokens: int | None) -> str:
        from llama_index_carag.verdicts.label_scores import scorer_for

        if mode in ("auto", "score"):
            self._scorer = scorer_for(self._llm, max_tokens, self._settings.max_sentences, self._settings.explain)
            if self._scorer is not None:
                return "score"
            if mode == "score":
                raise ValueError("label_mode='score' needs a local LLM: a HuggingFaceLLM or a LlamaCPP.")
        function_calling = getattr(self._llm.metadata, "is_function_calling_model", False)
        if mode == "structured" or (mode == "auto" and function_calling):
            return "structured"
        return "text"

    @property
    def settings(self) -> VerdictSettings:
        """The synthesizer's :class:`VerdictSettings`."""
        return self._settings

    @property
    def decision(self) -> LabelDecision | None:
        """The :class:`LabelDecision` (the verifier's in any mode; the arg-max in ``"score"`` mode; else ``None``)."""
        return self._decision

    @property
    def label_mode(self) -> str:
        """The resolved way labels are obtained: ``"score"``, ``"structured"`` or ``"text"``."""
        return self._label_mode

    # ----------------------------------------------------------------- prompts
    def _get_prompts(self) -> PromptDictType:
        return {"fact_check_template": self._template, "explain_template": self._explain_template}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "fact_check_template" in prompts:
            self._template = prompts["fact_check_template"]
        if "explain_template" in prompts:
            self._explain_template = prompts["explain_template"]

    # ---------------------------------------------------------------- helpers
    def _context(
        self, text_chunks: Sequence[str], evidence_ids: Sequence[str] | None, numbers: Sequence[int] | None = None
    ) -> str:
        ids = list(evidence_ids) if (self._show_ids and evidence_ids is not None) else None
        if ids is not None and len(ids) != len(text_chunks):
            ids = None
        return format_evidence(list(text_chunks), ids, numbers)

    def parse(self, text: str, evidence_ids: Sequence[str] | None = None) -> Verdict:
        """Parse an LLM answer into a :class:`Verdict` (citations mapped to ``evidence_ids``, explanation checked)."""
        verdict = parse_verdict(text, evidence_ids=evidence_ids, max_sentences=self._settings.max_sentences)
        if evidence_ids is None or not verdict.parsed:
            return verdict
        return self._checked(verdict.label, verdict.explanation, list(evidence_ids), text, "text")

    def _checked(self, label: VerdictLabel, explanation: str, ids: list[str], raw: str, method: str) -> Verdict:
        limit = self._settings.max_sentences
        return checked_verdict(label, explanation, ids, raw=raw, method=method, max_sentences=limit)

    def messages(
        self,
        query_str: str,
        text_chunks: Sequence[str],
        evidence_ids: Sequence[str] | None = None,
        numbers: Sequence[int] | None = None,
    ) -> list:
        """The chat messages of the fact-check prompt for a claim and its passages (as the LLM sees them).

        In ``"score"`` mode a selector template gives its chat variant: the scorer renders the
        messages with the model's own chat template (``LlamaCPP`` does not report itself as a chat model).
        """
        from llama_index_carag.verdicts.prompts import FACT_CHECK_CHAT_PROMPT

        template = self._template
        if isinstance(template, SelectorPromptTemplate):
            template = chat_variant(template) if self._label_mode == "score" else template.select(self._llm)
        if not hasattr(template, "format_messages"):
            template = FACT_CHECK_CHAT_PROMPT

        def question(claim: str, texts: Sequence[str], ids: Sequence[str] | None = None, nums: Any = None) -> list:
            return template.format_messages(query_str=fence(claim), context_str=self._context(texts, ids, nums))

        messages = question(query_str, text_chunks, evidence_ids, numbers)
        if not self._settings.examples:
            return messages
        from llama_index_carag.verdicts.prompts import example_turns

        system = [m for m in messages if m.role == MessageRole.SYSTEM]
        rest = [m for m in messages if m.role != MessageRole.SYSTEM]
        return system + example_turns(self._settings.examples, question) + rest

    def score_labels(self, query_str: str, nodes: Sequence[NodeWithScore]) -> Any:
        """The label log-likelihoods for a claim and its evidence, without an explanation (``"score"`` mode only).

        Returns a :class:`~llama_index_carag.verdicts.label_scores.LabelScores`.
        """
        if self._scorer is None:
            raise ValueError(f"score_labels needs label_mode 'score'; this synthesizer uses {self._label_mode!r}.")
        texts = evidence_texts(nodes)
        scores, _, _ = self._scorer.score(self.messages(query_str, texts, [n.node.node_id for n in nodes]))
        return scores

    # ---------------------------------------------------------------- verdicts
    def verdict(self, query: QueryTextType, nodes: Sequence[NodeWithScore]) -> Verdict:
        """The :class:`Verdict` on ``nodes`` (numbered in order), without a ``Response`` (any mode but streaming).

        ``query``: the claim, or a ``QueryBundle``.  No evidence: NOT_ENOUGH_INFO, no LLM call.
        """
        bundle = QueryBundle(query) if isinstance(query, str) else query
        if not nodes:
            return no_evidence_verdict()
        texts, ids = evidence_texts(nodes), [n.node.node_id for n in nodes]
        if self._verified_first():
            return self._verified(bundle, texts, ids, self._llm.predict)
        if self._label_mode == "score":
            return self._scored(bundle, texts, ids)
        if self._label_mode == "structured":
            try:
                out = self._llm.structured_predict(
                    VerdictOutput, self._template, **self._prompt_args(bundle, texts, ids)
                )
                return self._structured(out, ids)
            except Exception as exc:  # a model that cannot follow the schema: fall back to free text
                logger.warning("structured_predict failed (%s); parsing free text instead.", exc)
        return self.parse(self._llm.predict(self._template, **self._prompt_args(bundle, texts, ids)), ids)

    async def averdict(self, query: QueryTextType, nodes: Sequence[NodeWithScore]) -> Verdict:
        """:meth:`verdict` with the LLM's async calls (scored labels run on a worker thread)."""
        bundle = QueryBundle(query) if isinstance(query, str) else query
        if not nodes:
            return no_evidence_verdict()
        texts, ids = evidence_texts(nodes), [n.node.node_id for n in nodes]
        if self._verified_first():
            decided = await asyncio.to_thread(self._verified, bundle, texts, ids, None)
            if not self._settings.explain:
                return decided
            text = await self._llm.apredict(self._explain_template, **self._explain_args(bundle, texts, ids, decided))
            return self._explained(decided, text, ids)
        if self._label_mode == "score":
            return await asyncio.to_thread(self._scored, bundle, texts, ids)
        if self._label_mode == "structured":
            try:
                args = self._prompt_args(bundle, texts, ids)
                return self._structured(await self._llm.astructured_predict(VerdictOutput, self._template, **args), ids)
            except Exception as exc:
                logger.warning("structured_predict failed (%s); parsing free text instead.", exc)
        return self.parse(await self._llm.apredict(self._template, **self._prompt_args(bundle, texts, ids)), ids)

    def _verified_first(self) -> bool:
        """Whether the verifier decides before (and without) the LLM: always, except in ``"score"`` mode with an
        explanation, where the scored path decides with it and explains on the same prompt state."""
        return isinstance(self._decision, VerifierDecision) and (
            self._label_mode != "score" or not self._settings.explain
        )

    def _verified(self, bundle: QueryBundle, texts: Sequence[str], ids: list[str], predict: Any) -> Verdict:
        """The verifier's verdict (:func:`~llama_index_carag.verdicts.scored.decided`, :func:`~llama_index_carag.verdicts.scored.explained`), explained by ``predict`` (the
        LLM's ``predict``) unless it is ``None`` or no explanation is asked for (then no LLM call)."""
        assert self._decision is not None
        verdict = decided(self._decision, bundle.query_str, texts, ids)
        if predict is None or not self._settings.explain:
            return verdict
        return self._explained(
            verdict, predict(self._explain_template, **self._explain_args(bundle, texts, ids, verdict)), ids
        )

    def _explain_args(self, bundle: QueryBundle, texts: Sequence[str], ids: Sequence[str], verdict: Verdict) -> dict:
        """The explanation prompt's arguments: the label and the passages as the verifier read them."""
        return {
            "label_str": label_words(verdict),
            **self._prompt_args(bundle, as_read(texts, verdict.passage_stances), ids),
        }

    def _explained(self, verdict: Verdict, text: str, ids: list[str]) -> Verdict:
        limits = {"max_sentences": self._settings.max_sentences, "explain_passages": self._settings.explain_passages}
        return explained(verdict, text, ids, **limits)

    def _prompt_args(self, bundle: QueryBundle, texts: Sequence[str], ids: Sequence[str] | None) -> dict[str, str]:
        return {"query_str": fence(bundle.query_str), "context_str": self._context(texts, ids)}

    def _scored(self, bundle: QueryBundle, texts: Sequence[str], ids: list[str]) -> Verdict:
        assert self._scored_verdicts is not None
        verdict = self._scored_verdicts.verdict(bundle.query_str, texts, ids)
        return with_answer_text(verdict if self._settings.explain else verdict.model_copy(update=UNEXPLAINED))

    def _structured(self, out: Any, ids: list[str]) -> Verdict:
        label = VerdictLabel(label_value(out.label))
        verdict = self._checked(label, out.explanation, ids, out.model_dump_json(), "structured")
        return with_answer_text(verdict)

    # --------------------------------------------------------------- LLM call
    def get_response(
        self,
        query_str: str,
        text_chunks: Sequence[str],
        evidence_ids: Sequence[str] | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TEXT_TYPE:
        """The LLM's answer as text (``"Verdict: …\nExplanation: …"`` in the score and structured modes),
        or a generator of text deltas when streaming."""
        bundle, ids = QueryBundle(query_str), self._ids(text_chunks, evidence_ids)
        if self._streaming:
            template, args = self._stream_prompt(bundle, text_chunks, evidence_ids)
            return self._llm.stream(template, **args)
        if self._label_mode == "score":
            return self._scored(bundle, text_chunks, ids).raw
        return self._llm.predict(self._template, **self._prompt_args(bundle, text_chunks, evidence_ids))

    def _stream_verdict(self, query: QueryTextType, nodes: Sequence[NodeWithScore]) -> Verdict | None:
        """The verifier's unexplained verdict before a stream (its text is then the explanation), else ``None``."""
        if not isinstance(self._decision, VerifierDecision):
            return None
        claim = query if isinstance(query, str) else query.query_str
        return decided(self._decision, claim, evidence_texts(nodes), [n.node.node_id for n in nodes])

    def _stream_prompt(self, bundle: QueryBundle, texts: Sequence[str], ids: Sequence[str] | None) -> tuple[Any, dict]:
        verdict = _STREAM_VERDICT.get()
        if verdict is None:
            return self._template, self._prompt_args(bundle, texts, ids)
        return self._explain_template, self._explain_args(bundle, texts, list(ids or []), verdict)

    @staticmethod
    def _ids(text_chunks: Sequence[str], evidence_ids: Sequence[str] | None) -> list[str]:
        if evidence_ids is not None and len(evidence_ids) == len(text_chunks):
            return [str(i) for i in evidence_ids]
        return [str(i) for i in range(1, len(text_chunks) + 1)]

    async def aget_response(
        self,
        query_str: str,
        text_chunks: Sequence[str],
        evidence_ids: Sequence[str] | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TEXT_TYPE:
        bundle, ids = QueryBundle(query_str), self._ids(text_chunks, evidence_ids)
        if self._streaming:
            template, args = self._stream_prompt(bundle, text_chunks, evidence_ids)
            return await self._llm.astream(template, **args)
        if self._label_mode == "score":
            return (await asyncio.to_thread(self._scored, bundle, text_chunks, ids)).raw
        return await self._llm.apredict(self._template, **self._prompt_args(bundle, text_chunks, evidence_ids))

    # ------------------------------------------------------------ synthesize
    @dispatcher.span
    def synthesize(
        self,
        query: QueryTextType,
        nodes: list[NodeWithScore],
        additional_source_nodes: Sequence[NodeWithScore] | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        """The verdict on the claim and ``nodes`` (numbered in order) as a ``Response`` (module docstring).

        With no evidence the LLM is not called: the verdict is NOT_ENOUGH_INFO.
        """
        if not nodes:
            return self._no_evidence(additional_source_nodes)
        if self._streaming:
            response_kwargs.setdefault("evidence_ids", [n.node.node_id for n in nodes])
            verdict = self._stream_verdict(query, nodes)
            token = _STREAM_VERDICT.set(verdict)
            sources = with_stances(hide_labels(nodes), verdict.passage_stances if verdict else None)
            try:
                return super().synthesize(query, sources, additional_source_nodes, **response_kwargs)
            finally:
                _STREAM_VERDICT.reset(token)
        bundle = QueryBundle(query) if isinstance(query, str) else query
        with self._events(bundle) as done:
            return done(self._response(self.verdict(bundle, nodes), nodes, additional_source_nodes))

    @dispatcher.span
    async def asynthesize(
        self,
        query: QueryTextType,
        nodes: list[NodeWithScore],
        additional_source_nodes: Sequence[NodeWithScore] | None = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        if not nodes:
            return self._no_evidence(additional_source_nodes, use_async=True)
        if self._streaming:
            response_kwargs.setdefault("evidence_ids", [n.node.node_id for n in nodes])
            verdict = await asyncio.to_thread(self._stream_verdict, query, nodes)
            token = _STREAM_VERDICT.set(verdict)
            sources = with_stances(hide_labels(nodes), verdict.passage_stances if verdict else None)
            try:
                return await super().asynthesize(query, sources, additional_source_nodes, **response_kwargs)
            finally:
                _STREAM_VERDICT.reset(token)
        bundle = QueryBundle(query) if isinstance(query, str) else query
        with self._events(bundle) as done:
            return done(self._response(await self.averdict(bundle, nodes), nodes, additional_source_nodes))

    @contextmanager
    def _events(self, bundle: QueryBundle) -> Iterator[Any]:
        """The synthesis events ``BaseSynthesizer.synthesize`` sends, around one verdict; yields ``done(response)``."""
        dispatcher.event(SynthesizeStartEvent(query=bundle))
        sent: list[Response] = []

        def done(response: Response) -> Response:
            sent.append(response)
            return response

        with self._callback_manager.event(
            CBEventType.SYNTHESIZE, payload={EventPayload.QUERY_STR: bundle.query_str}
        ) as ev:
            yield done
            ev.on_end(payload={EventPayload.RESPONSE: sent[0]})
        dispatcher.event(SynthesizeEndEvent(query=bundle, response=sent[0]))

    def _response(
        self, verdict: Verdict, nodes: Sequence[NodeWithScore], additional: Sequence[NodeWithScore] | None
    ) -> Response:
        """``Response``: the explanation, the verdict, and the evidence with each passage's stance (if scored)."""
        sources = with_stances(hide_labels(nodes), verdict.passage_stances)
        sources += list(additional or [])
        metadata = self._get_metadata_for_response([n.node for n in sources]) or {}
        return Response(verdict.explanation, source_nodes=sources, metadata={**metadata, VERDICT_KEY: verdict})

    def _no_evidence(self, additional: Sequence[NodeWithScore] | None, use_async: bool = False) -> RESPONSE_TYPE:
        verdict, sources = no_evidence_verdict(), list(additional or [])
        if self._streaming:
            return fixed_stream(verdict, sources, use_async)
        return Response(verdict.explanation, source_nodes=sources, metadata={VERDICT_KEY: verdict})

    def _prepare_response_output(
        self, response_str: RESPONSE_TEXT_TYPE | None, source_nodes: list[NodeWithScore]
    ) -> RESPONSE_TYPE:
        """The streaming response (the only answer still assembled by ``BaseSynthesizer``)."""
        ids = [n.node.node_id for n in source_nodes]
        metadata = self._get_metadata_for_response([n.node for n in source_nodes]) or {}
        verdict = _STREAM_VERDICT.get()
        parse = (
            (lambda text: self.parse(text, ids)) if verdict is None else (lambda t: self._explained(verdict, t, ids))
        )
        streamed = parsing_response(response_str, source_nodes, metadata, parse)
        return streamed if streamed is not None else super()._prepare_response_output(response_str, source_nodes)


def get_fact_check_synthesizer(
    llm: LLM | str | None = None,
    streaming: bool = False,
    *,
    settings: VerdictSettings | None = None,
    fact_check_template: BasePromptTemplate | None = None,
    callback_manager: CallbackManager | None = None,
    verifier: Any = None,
    index: str | os.PathLike[str] | None = None,
    **options: Any,
) -> FactCheckSynthesizer:
    """Build a :class:`FactCheckSynthesizer`: the one door to an index's verdict half.

    Args:
        llm: a LlamaIndex LLM, a Hugging Face id/path, ``"qwen1.5b"``/``"smollm2"``,
            or ``None`` for the offline default (Qwen2.5-Coder-1.5B-Instruct).
        streaming: stream the model's text (free-text labels).
        settings: :class:`VerdictSettings` (default: the claim verifier decides; ``decision="llm"``: the LLM's own label).
        fact_check_template: prompt override (``query_str``, ``context_str``).
        verifier: the claim verifier of the default decision (see :class:`FactCheckSynthesizer`).
        index: an index folder (what ``ContextAwareRetriever.from_persist_dir`` and ``carag check --index`` read):
            its own verifier decides — the archive's fit of ``carag index --calibrate`` or the domain check of
            ``carag index`` (:func:`~llama_index_carag.verifier.model.index_verifier`); the shipped one when it
            has none.  ``carag check``, ``chat``, ``check-text`` and ``carag serve`` build theirs here.
        **options: :class:`VerdictSettings` fields (e.g. ``max_sentences``, ``label_mode``, ``decision``).

    Raises:
        ValueError: both ``verifier`` and ``index``.
    """
    from llama_index_carag.models.resolve import resolve_llm

    if index is not None:
        if verifier is not None:
            raise ValueError("Pass verifier or index (whose verifier decides), not both.")
        decision = options.get("decision") or (settings or VerdictSettings()).decision
        if decision == "verifier":
            from llama_index_carag.verifier.model import index_verifier

            verifier = index_verifier(index)
    return FactCheckSynthesizer(
        resolve_llm(llm),
        settings=settings,
        fact_check_template=fact_check_template,
        streaming=streaming,
        callback_manager=callback_manager,
        verifier=verifier,
        **options,
    )


# --- streaming: the model's text passed through, the verdict parsed when the stream ends -----------

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
