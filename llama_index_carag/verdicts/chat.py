"""A chat-style fact-check bot: each message is checked by the one claim check, follow-ups in context.

:class:`FactCheckChatBot` keeps the conversation; a follow-up message ("and in 2020?") is first
condensed with the conversation into a standalone claim by the LLM (LlamaIndex's condense prompt),
then checked by its :class:`~llama_index_carag.verdicts.check.ClaimChecker` — the same retrieval
and verdict as ``carag check`` and ``carag serve``.  It also has a terminal REPL (used by
``examples/chat_bot.py`` and ``carag chat``).
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llama_index.core.chat_engine.condense_plus_context import DEFAULT_CONDENSE_PROMPT_TEMPLATE
from llama_index.core.llms import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import NodeWithScore

from llama_index_carag.core.validation import sanitize_text
from llama_index_carag.ranking.stage import CARAG_METADATA_KEY
from llama_index_carag.verdicts.check import ClaimChecker
from llama_index_carag.verdicts.excerpts import shown_passage
from llama_index_carag.verdicts.types import VERDICT_KEY, Verdict

logger = logging.getLogger(__name__)

_CONDENSE_PROMPT = PromptTemplate(DEFAULT_CONDENSE_PROMPT_TEMPLATE)


@dataclass
class ChatTurn:
    """One answer of the bot: the verdict, the evidence it rests on, the answer's text and the claim checked."""

    verdict: Verdict
    sources: list[NodeWithScore]
    text: str
    claim: str = ""


class FactCheckChatBot:
    """Ask claims, get verdicts with cited evidence; keeps the conversation.

    Args:
        checker: a :class:`ClaimChecker` with a synthesizer (it gives every verdict).
        llm: condenses a follow-up with the conversation into a standalone claim; ``None``: every
            message is checked as it is.
        max_history: at most this many earlier turns are shown to ``llm`` when condensing.
        history: the conversation so far, ``(message, answer)`` pairs; the bot appends to this list (a server
            keeps it per session and makes a bot per turn).  Default: a new, empty one.
    """

    def __init__(
        self,
        checker: ClaimChecker,
        llm: LLM | None = None,
        *,
        max_history: int = 4,
        history: list[tuple[str, str]] | None = None,
    ) -> None:
        if checker.synthesizer is None:
            raise ValueError("FactCheckChatBot needs a ClaimChecker with a synthesizer (it answers with verdicts).")
        self.checker, self.llm, self.max_history = checker, llm, max_history
        self.history: list[tuple[str, str]] = [] if history is None else history

    @classmethod
    def from_retriever(cls, retriever: Any, llm: LLM, **synthesizer_options: Any) -> FactCheckChatBot:
        """A bot over ``retriever`` whose verdicts come from a ``FactCheckSynthesizer`` on ``llm``
        (``synthesizer_options``: :class:`~llama_index_carag.verdicts.decision.VerdictSettings` fields)."""
        from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

        return cls(ClaimChecker(retriever, FactCheckSynthesizer(llm, **synthesizer_options)), llm)

    def standalone_claim(self, message: str) -> str:
        """``message`` as a standalone claim: condensed with the conversation by the LLM (the first message,
        or without an LLM, as it is)."""
        if self.llm is None or not self.history:
            return message
        turns = self.history[-self.max_history :]
        history = "\n".join(f"user: {q}\nassistant: {a}" for q, a in turns)
        condensed = sanitize_text(str(self.llm.predict(_CONDENSE_PROMPT, chat_history=history, question=message)))
        return condensed.strip() or message

    def ask(self, message: str) -> ChatTurn:
        """Check one message (a claim or a follow-up); the verdict, its evidence and the answer's text."""
        if not isinstance(message, str) or not message.strip():
            raise ValueError("Empty message: type a claim to check.")
        claim = self.standalone_claim(message)
        response = self.checker.verdict(self.checker.retrieve(claim))
        verdict: Verdict = (response.metadata or {})[VERDICT_KEY]
        self.history.append((message, f"{verdict.label.value}: {verdict.explanation}"))
        return ChatTurn(verdict, list(response.source_nodes), verdict.raw or verdict.explanation, claim)

    def reset(self) -> None:
        """Forget the conversation."""
        self.history.clear()

    @staticmethod
    def render(turn: ChatTurn, width: int = 100) -> str:
        """Human-readable verdict, explanation and evidence table."""
        note = "" if turn.verdict.parsed else "  (no label found in the model's answer)"
        lines = [f"Verdict: {turn.verdict.label.value}{note}", f"Explanation: {turn.verdict.explanation}"]
        cited = set(turn.verdict.evidence_ids)

        def shown(n: NodeWithScore) -> str:  # a long passage as the excerpt its stance was read from
            return shown_passage(
                n.node.get_content(), (n.node.metadata.get(CARAG_METADATA_KEY) or {}).get("stance_excerpt")
            )

        for i, n in enumerate(turn.sources, start=1):
            if n.node.node_id in cited:
                lines.append(f"  cited [{i}] {n.node.node_id}: {textwrap.shorten(shown(n), width=140)}")
        if turn.verdict.invalid_citations:
            lines.append(f"  (removed citations to passages that were not shown: {turn.verdict.invalid_citations})")
        lines.append("Evidence:")
        for i, n in enumerate(turn.sources, start=1):
            info = n.node.metadata.get(CARAG_METADATA_KEY, {})
            mark = "*" if n.node.node_id in cited else " "
            extra = ""
            if info:
                extra = f" cluster={info.get('cluster')} in_soi={info.get('in_soi')}"
            text = textwrap.shorten(shown(n), width=max(30, width - 40))
            lines.append(f" {mark}[{i}] {n.node.node_id}{extra}: {text}")
        if cited:
            lines.append(" (* = cited in the explanation)")
        return "\n".join(lines)

    def repl(self, read: Callable[[str], str] = input, write: Callable[[str], Any] = print) -> None:
        """Read claims until EOF, ``quit`` or ``exit``; ``reset`` clears the conversation."""
        write("Fact-check bot. Type a claim (or 'reset', 'quit').")
        while True:
            try:
                message = read("claim> ")
            except (EOFError, KeyboardInterrupt):
                write("")
                return
            command = message.strip().lower()
            if command in ("quit", "exit"):
                return
            if command == "reset":
                self.reset()
                write("(conversation cleared)")
                continue
            if not command:
                continue
            try:
                write(self.render(self.ask(message)))
            except ValueError as exc:
                write(f"error: {exc}")
