"""Worked examples put before the claim in the fact-check prompt (few-shot prompting).

Small local models decide better when the prompt shows, once per label, what a
verdict looks like: a claim, its numbered passages, and the answer.
:data:`DEFAULT_EXAMPLES` are three short, domain-neutral examples written for this
package (one SUPPORTED, one REFUTED, one NOT ENOUGH INFO, where the passages are on
topic but do not settle the claim).  They are not taken from any benchmark.

:func:`example_turns` renders examples as chat turns in the exact form of the real
question (same template, same evidence numbering), so the model's answer to the
real claim follows the same pattern.  The turns come first and never change: every
claim's prompt starts with the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llama_index.core.llms import ChatMessage, MessageRole

from llama_index_carag.verdicts import VerdictLabel

__all__ = ["VerdictExample", "DEFAULT_EXAMPLES", "example_turns", "answer_text"]


@dataclass(frozen=True)
class VerdictExample:
    """One worked example: a claim, its passages (in rank order), the label and a short explanation."""

    claim: str
    passages: tuple[str, ...]
    label: VerdictLabel
    explanation: str

    def __post_init__(self) -> None:
        if not self.claim.strip() or not self.passages or not self.explanation.strip():
            raise ValueError("A VerdictExample needs a claim, at least one passage and an explanation.")
        object.__setattr__(self, "label", VerdictLabel(self.label))
        object.__setattr__(self, "passages", tuple(self.passages))


#: Three examples, one per label; written for this package, domain-neutral.
DEFAULT_EXAMPLES: tuple[VerdictExample, ...] = (
    VerdictExample(
        claim="The city council approved the downtown bike lane plan.",
        passages=(
            "On Tuesday the city council voted 7 to 2 to approve the downtown bike lane plan.",
            "Construction of the lanes is expected to start next spring.",
        ),
        label=VerdictLabel.SUPPORTED,
        explanation="Passage [1] reports that the council voted 7 to 2 to approve the plan.",
    ),
    VerdictExample(
        claim="The new river bridge opened to traffic in 2015.",
        passages=(
            "Delayed by funding disputes, the river bridge finally opened to traffic in March 2019.",
            "The bridge carries about 20,000 vehicles a day.",
        ),
        label=VerdictLabel.REFUTED,
        explanation="Passage [1] says the bridge opened in March 2019, not in 2015.",
    ),
    VerdictExample(
        claim="The company's profits doubled last year.",
        passages=(
            "The company hired 200 new staff last year and opened an office in Lisbon.",
            "Its chief executive said the market for its products keeps growing.",
        ),
        label=VerdictLabel.NOT_ENOUGH_INFO,
        explanation="The passages describe hiring, a new office and a growing market, but say nothing about profits.",
    ),
)


def answer_text(label: VerdictLabel, explanation: str) -> str:
    """The answer in the prompt's two-line format: ``"Verdict: REFUTED\\nExplanation: ..."``."""
    return f"Verdict: {VerdictLabel(label).value.replace('_', ' ')}\nExplanation: {explanation}"


def example_turns(
    examples: Sequence[VerdictExample], question: Callable[[str, Sequence[str]], Sequence[ChatMessage]]
) -> list[ChatMessage]:
    """Chat turns for ``examples``: for each, the question's user turn(s), then the assistant's answer.

    Args:
        examples: the worked examples, in order.
        question: renders a claim and its passages as the real prompt's messages; its system
            messages are dropped here (the real prompt keeps its own).
    """
    turns: list[ChatMessage] = []
    for example in examples:
        turns += [m for m in question(example.claim, example.passages) if m.role != MessageRole.SYSTEM]
        turns.append(ChatMessage(role=MessageRole.ASSISTANT, content=answer_text(example.label, example.explanation)))
    return turns
