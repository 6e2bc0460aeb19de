"""Worked examples before the claim: their place in the prompt, their form, and their checks."""

from __future__ import annotations

import pytest
from llama_index.core.llms import MessageRole

from llama_index_carag.verdicts import VerdictLabel, parse_verdict
from llama_index_carag.verdicts.prompts import DEFAULT_EXAMPLES, VerdictExample, answer_text, example_turns
from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

from .helpers import StubLLM


class _ChatStub(StubLLM):
    @property
    def metadata(self):
        meta = super().metadata
        return meta.model_copy(update={"is_chat_model": True})


def test_examples_come_between_the_instructions_and_the_claim():
    synth = FactCheckSynthesizer(_ChatStub(), examples=DEFAULT_EXAMPLES)
    messages = synth.messages("The moon is made of cheese.", ["The moon is rock."])
    roles = [m.role for m in messages]
    assert roles == [MessageRole.SYSTEM] + [MessageRole.USER, MessageRole.ASSISTANT] * 3 + [MessageRole.USER]
    assert "The moon is made of cheese." in messages[-1].content
    assert "downtown bike lane plan" in messages[1].content and "[1] On Tuesday" in messages[1].content
    answers = [parse_verdict(m.content) for m in messages if m.role == MessageRole.ASSISTANT]
    assert [a.label for a in answers] == [VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO]
    plain = FactCheckSynthesizer(_ChatStub()).messages("The moon is made of cheese.", ["The moon is rock."])
    assert [m.content for m in plain] == [messages[0].content, messages[-1].content]  # no examples by default


def test_the_examples_are_a_prefix_shared_by_every_claim():
    synth = FactCheckSynthesizer(_ChatStub(), examples=DEFAULT_EXAMPLES)
    a = synth.messages("Claim one.", ["Passage a."])
    b = synth.messages("A different claim.", ["Passage b.", "Passage c."])
    assert [m.content for m in a[:-1]] == [m.content for m in b[:-1]]


def test_answer_text_and_example_checks():
    assert (
        answer_text(VerdictLabel.NOT_ENOUGH_INFO, "Nothing on it.")
        == "Verdict: NOT ENOUGH INFO\nExplanation: Nothing on it."
    )
    example = VerdictExample("A claim.", ["A passage."], "REFUTED", "Why.")
    assert example.label is VerdictLabel.REFUTED and example.passages == ("A passage.",)
    with pytest.raises(ValueError, match="needs a claim, at least one passage"):
        VerdictExample("A claim.", (), VerdictLabel.SUPPORTED, "Why.")
    with pytest.raises(ValueError):
        VerdictExample("A claim.", ("p",), "MAYBE", "Why.")


def test_example_turns_drop_the_question_system_message():
    from llama_index.core.llms import ChatMessage

    def question(claim, passages):
        return [ChatMessage(role=MessageRole.SYSTEM, content="sys"), ChatMessage(role=MessageRole.USER, content=claim)]

    turns = example_turns(DEFAULT_EXAMPLES[:1], question)
    assert [(t.role, t.content.split("\n")[0]) for t in turns] == [
        (MessageRole.USER, DEFAULT_EXAMPLES[0].claim),
        (MessageRole.ASSISTANT, "Verdict: SUPPORTED"),
    ]
