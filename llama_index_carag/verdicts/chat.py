"""A chat-style fact-check bot on LlamaIndex's ``CondensePlusContextChatEngine``.

:func:`fact_check_chat_engine` wires any retriever (typically a
``ContextAwareRetriever``) and any LLM into a ``CondensePlusContextChatEngine``
with a fact-checking system prompt, fenced evidence, and passage numbers the
model can cite.  :class:`FactCheckChatBot` adds the verdict parsing and a
terminal REPL (used by ``examples/chat_bot.py`` and ``carag chat``).
"""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_carag.core.provenance import CARAG_METADATA_KEY
from llama_index_carag.verdicts import Verdict, parse_verdict
from llama_index_carag.verdicts.explanation_checks import checked_verdict
from llama_index_carag.verdicts.prompts import FACT_CHECK_CHAT_SYSTEM_PROMPT, FACT_CHECK_CONTEXT_PROMPT, fence

logger = logging.getLogger(__name__)

__all__ = ["PassageNumberer", "fact_check_chat_engine", "FactCheckChatBot", "ChatTurn"]

PASSAGE_KEY = "passage"


class PassageNumberer(BaseNodePostprocessor):
    """Label the i-th node ``[i]`` in the text the LLM sees, and fence its text (on copies), so the
    model can cite ``[i]`` and a passage cannot close the ``<evidence>`` block."""

    @classmethod
    def class_name(cls) -> str:
        return "PassageNumberer"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        out = []
        for i, n in enumerate(nodes, start=1):
            node = n.node
            hidden = [k for k in node.excluded_llm_metadata_keys if k != PASSAGE_KEY]
            update: dict[str, Any] = {
                "metadata": {**node.metadata, PASSAGE_KEY: f"[{i}]"},
                "excluded_llm_metadata_keys": hidden,
                "excluded_embed_metadata_keys": list(dict.fromkeys([*node.excluded_embed_metadata_keys, PASSAGE_KEY])),
            }
            if hasattr(node, "text"):
                update["text"] = fence(node.text)  # evidence tags inside the data cannot close the fence
            if all(k in hidden for k in node.metadata if k != PASSAGE_KEY) and hasattr(node, "text_template"):
                # Only the number is visible: render "[i] text" rather than "passage: [i]\n\ntext".
                update.update(metadata_template="{value}", text_template="{metadata_str} {content}")
            copy = node.model_copy(update=update)
            out.append(NodeWithScore(node=copy, score=n.score))
        return out


def fact_check_chat_engine(retriever: Any, llm: Any, **kwargs: Any) -> CondensePlusContextChatEngine:
    """``CondensePlusContextChatEngine.from_defaults`` with the fact-check prompts and passage numbers."""
    postprocessors = [*kwargs.pop("node_postprocessors", []), PassageNumberer()]
    kwargs.setdefault("system_prompt", FACT_CHECK_CHAT_SYSTEM_PROMPT)
    kwargs.setdefault("context_prompt", FACT_CHECK_CONTEXT_PROMPT)
    return CondensePlusContextChatEngine.from_defaults(
        retriever=retriever, llm=llm, node_postprocessors=postprocessors, **kwargs
    )


@dataclass
class ChatTurn:
    """One answer of the bot: the parsed verdict and the evidence shown to the model."""

    verdict: Verdict
    sources: list[NodeWithScore]
    text: str


class FactCheckChatBot:
    """Ask claims, get verdicts with cited evidence; keeps the conversation.

    Args:
        retriever: any LlamaIndex retriever (a ``ContextAwareRetriever`` adds SOI provenance).
        llm: any LlamaIndex LLM.
    """

    def __init__(self, retriever: Any, llm: Any, **engine_kwargs: Any) -> None:
        self.engine = fact_check_chat_engine(retriever, llm, **engine_kwargs)

    def ask(self, message: str) -> ChatTurn:
        """Send one message; return the verdict parsed from the reply and the sources."""
        if not isinstance(message, str) or not message.strip():
            raise ValueError("Empty message: type a claim to check.")
        reply = self.engine.chat(message)
        sources = list(reply.source_nodes)
        ids = [n.node.node_id for n in sources]
        verdict = parse_verdict(str(reply), evidence_ids=ids)
        if verdict.parsed:  # citations only to the passages shown, no sentence against the label
            verdict = checked_verdict(verdict.label, verdict.explanation, ids, raw=verdict.raw, method="text")
        return ChatTurn(verdict, sources, str(reply))

    def reset(self) -> None:
        self.engine.reset()

    @staticmethod
    def render(turn: ChatTurn, width: int = 100) -> str:
        """Human-readable verdict, explanation and evidence table."""
        note = "" if turn.verdict.parsed else "  (no label found in the model's answer)"
        lines = [f"Verdict: {turn.verdict.label.value}{note}", f"Explanation: {turn.verdict.explanation}"]
        cited = set(turn.verdict.evidence_ids)
        for i, n in enumerate(turn.sources, start=1):
            if n.node.node_id in cited:
                lines.append(f"  cited [{i}] {n.node.node_id}: {textwrap.shorten(n.node.get_content(), width=140)}")
        if turn.verdict.invalid_citations:
            lines.append(f"  (removed citations to passages that were not shown: {turn.verdict.invalid_citations})")
        lines.append("Evidence:")
        for i, n in enumerate(turn.sources, start=1):
            info = n.node.metadata.get(CARAG_METADATA_KEY, {})
            mark = "*" if n.node.node_id in cited else " "
            extra = ""
            if info:
                extra = f" cluster={info.get('cluster')} in_soi={info.get('in_soi')}"
            text = textwrap.shorten(n.node.get_content(), width=max(30, width - 40))
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
