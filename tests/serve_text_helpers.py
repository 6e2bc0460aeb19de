"""Helpers of the text and batch tests of ``carag serve``: a stub LLM whose verdict follows a word of the
claim, so one text gets all three labels (``--llm-factory tests.serve_text_helpers:make_label_stub_llm``),
the app on it, and the SSE reader."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from tests.serve_helpers import ServeStubLLM

#: A claim containing the word gets the answer (checked in this order); any other claim: NOT ENOUGH INFO.
ANSWERS = {
    "solar": "Verdict: SUPPORTED. Passage [1] reports that solar panel costs fell.",
    "wind": "Verdict: REFUTED. Passage [1] finds fish return to wind farm areas.",
}
NEI_ANSWER = "Verdict: NOT ENOUGH INFO. The passages do not say."
_CLAIM = re.compile(r"<claim>\n(.*?)\n</claim>", re.DOTALL)  # the data block, not the instructions naming it


class LabelStubLLM(ServeStubLLM):
    """:class:`ServeStubLLM` answering by the claim's words (:data:`ANSWERS`)."""

    def _answer(self, prompt: str) -> str:
        found = _CLAIM.search(prompt)
        claim = (found.group(1) if found else "").lower()
        return next((answer for word, answer in ANSWERS.items() if word in claim), NEI_ANSWER)


def make_label_stub_llm() -> LabelStubLLM:
    """The ``--llm-factory`` of the text-mode browser test."""
    return LabelStubLLM()


def make_app(retriever: Any, llm: ServeStubLLM | None = None, **settings: Any) -> Any:
    """``create_app`` on ``retriever`` with ``llm`` for verdicts, streams and chat (None: retrieval only)."""
    from llama_index_carag.serve import ServeSettings, create_app
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    if llm is None:
        return create_app(retriever, settings=ServeSettings(**settings))
    return create_app(
        retriever,
        FactCheckSynthesizer(llm),
        stream_synthesizer=FactCheckSynthesizer(llm, streaming=True),
        llm=llm,
        settings=ServeSettings(**settings),
    )


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``(event, data)`` of a whole ``text/event-stream`` body."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The error object of ``response``, asserting its status, its one-key shape and its code."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"], body
    return body["error"]
