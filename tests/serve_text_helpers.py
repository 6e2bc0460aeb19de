"""Helpers of the text and batch tests of ``carag serve``: a stub LLM whose verdict follows a word of the
claim, so one text gets all three labels (``--llm-factory tests.serve_text_helpers:make_label_stub_llm``),
(the app, the SSE reader and the error check are :mod:`tests.serve_helpers`')."""

from __future__ import annotations

import re

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
