"""Scored verdicts: the decisions and settings, the explanation written after the passages the verifier's label
rests on (cited when it cites none of them), and the stances in the evidence's provenance."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from llama_index_carag.verdicts import VerdictLabel
from llama_index_carag.verdicts.decision import ArgMaxDecision, ScoredEvidence, VerdictSettings, VerifierDecision
from llama_index_carag.verdicts.excerpts import shown_excerpt, shown_passage
from llama_index_carag.verdicts.label_scores import LabelScores
from llama_index_carag.verdicts.scored import ScoredVerdicts, cite_passages, with_stances
from llama_index_carag.verdicts.types import PassageStance

S, R, N = VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO


class KeywordScorer:
    """A fake label scorer: every prompt leans to SUPPORTED by ``prior`` nats; a passage containing "confirms" /
    "denies" adds 3 nats to SUPPORTED / REFUTED, any other passage 1 nat to NOT_ENOUGH_INFO."""

    def __init__(self, prior: float = 2.0) -> None:
        self.prior, self.calls, self.explained = prior, 0, []

    def score(self, messages):
        self.calls += 1
        text = messages[-1].content
        evidence = text.split("<evidence>")[1].split("</evidence>")[0]
        logits = {S: self.prior, R: 0.0, N: 0.0}
        logits[S] += 3.0 * ("confirms" in evidence)
        logits[R] += 3.0 * ("denies" in evidence)
        logits[N] += 1.0 * (len(evidence.strip()) > 12 and "confirms" not in evidence and "denies" not in evidence)
        total = math.log(sum(math.exp(v) for v in logits.values()))
        return LabelScores({k: v - total for k, v in logits.items()}), None, [0]

    def verdict(self, messages, decide):
        scores = self.score(messages)[0]
        self.explained.append(messages[-1].content)
        label = decide(scores)
        return label, scores, "The passage says so."

    def explain_label(self, messages, label):
        self.explained.append(messages[-1].content)
        return "The passage says so."


class KeywordVerifier:
    """A fake claim verifier: a passage containing "denies" refutes the claim (0.9), any other says neither."""

    threshold = 0.5

    def readings(self, claim, texts):
        """Each passage read as a whole, except that a passage with several lines is read from its line that
        denies (the verifier's decisive chunk)."""
        read = [next((line for line in t.splitlines() if "denies" in line), t) for t in texts]
        return np.asarray([[0.05, 0.9, 0.05] if "denies" in t else [0.1, 0.1, 0.8] for t in read]), read

    def decide(self, probabilities):
        from llama_index_carag.verifier.model import decide_label

        return decide_label(probabilities, self.threshold)


def _stance(number, stance, score):
    probs = {k.value: (score if k == stance else (1 - score) / 2) for k in (S, R, N)}
    logs = {k: math.log(v) for k, v in probs.items()}
    return PassageStance(number=number, id=f"E{number}", stance=stance, score=score, probabilities=probs, logprobs=logs)


def test_the_llms_own_label_is_the_arg_max_of_its_scores():
    evidence = ScoredEvidence("c", ["x"], ["E1"], joint={S: -2.0, R: -1.0, N: -3.0})
    decided = ArgMaxDecision().decide(evidence)
    assert decided.label is R and decided.reason == "arg-max of the whole-evidence label log-likelihoods"
    assert ArgMaxDecision().decide(ScoredEvidence("c", ["x"], ["E1"], joint={S: -1.0, R: -1.0, N: -1.0})).label is S
    with pytest.raises(ValueError, match="joint"):
        ArgMaxDecision().decide(ScoredEvidence("c", ["x"], ["E1"]))


def test_settings_are_checked_and_frozen():
    settings = VerdictSettings()
    assert settings.decision == "verifier" and VerdictSettings(decision="llm").decision == "llm"
    for retired in ("argmax", "stance", "rule", "archive", "vote"):
        with pytest.raises(ValueError, match="decision must be one of"):
            VerdictSettings(decision=retired)
    with pytest.raises(ValueError, match="label_mode"):
        VerdictSettings(label_mode="guess")
    with pytest.raises(TypeError):
        VerdictSettings(calibration="none")  # type: ignore[call-arg]
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.decision = "llm"  # type: ignore[misc]


def test_cite_passages_adds_a_citation_only_when_missing():
    assert cite_passages("The study found X.", [2, 4]) == "The study found X [2, 4]."
    assert cite_passages("The study found X [4].", [2, 4]) == "The study found X [4]."
    assert cite_passages("No stop", [1]) == "No stop [1]."
    assert cite_passages("Anything.", []) == "Anything."


def _messages_fn(claim, texts, ids, numbers):
    from llama_index_carag.verdicts.prompts import FACT_CHECK_CHAT_PROMPT, format_evidence

    return FACT_CHECK_CHAT_PROMPT.format_messages(query_str=claim, context_str=format_evidence(texts, None, numbers))


def test_scored_verdicts_explain_from_the_passages_the_verifiers_label_rests_on():
    scorer = KeywordScorer()
    pipeline = ScoredVerdicts(scorer, VerifierDecision(KeywordVerifier()), VerdictSettings(), _messages_fn)
    texts = ["Nothing here.", "The minister denies it.", "Unrelated."]
    verdict = pipeline.verdict("A claim.", texts, ["E1", "E2", "E3"])
    assert verdict.label is R and verdict.decision == "verifier" and verdict.decision_passages == [2]
    assert verdict.method == "verifier" and [s.stance for s in verdict.passage_stances][1] == "REFUTED"
    assert "[2] The minister denies it." in scorer.explained[-1] and "Unrelated" not in scorer.explained[-1]
    assert verdict.cited_passages == [2] and verdict.evidence_ids == ["E2"]  # cited at the end
    assert verdict.label_scores is None and scorer.calls == 0  # the verifier decides: no label is scored


def test_the_explanation_prompt_shows_a_long_passage_as_the_chunk_its_stance_was_read_from():
    scorer = KeywordScorer()
    pipeline = ScoredVerdicts(scorer, VerifierDecision(KeywordVerifier()), VerdictSettings(), _messages_fn)
    long_passage = "The ministry met on Monday.\nThe minister denies it.\nThe weather was fine."
    verdict = pipeline.verdict("A claim.", ["Nothing here.", long_passage], ["E1", "E2"])
    assert verdict.label is R and verdict.decision_passages == [2]
    assert "[2] The minister denies it." in scorer.explained[-1]
    assert "Monday" not in scorer.explained[-1] and "weather" not in scorer.explained[-1]
    assert [st.excerpt for st in verdict.passage_stances] == [None, "The minister denies it."]


def test_read_texts_that_do_not_match_the_passages_give_no_excerpts():
    class Unmatched(KeywordVerifier):
        def readings(self, claim, texts):
            return super().readings(claim, texts)[0], []  # a verifier= that reports no read texts

    decided = VerifierDecision(Unmatched()).decide(
        ScoredEvidence("c", ["Nothing here.", "It denies it."], ["E1", "E2"])
    )
    assert [st.number for st in decided.stances] == [1, 2] and all(st.excerpt is None for st in decided.stances)


def test_the_verifier_reads_a_long_passage_from_its_most_decisive_chunk():
    from llama_index_carag.verifier.model import shipped_verifier

    verifier = shipped_verifier()
    claim = "Wearing masks reduces the spread of COVID-19."
    filler = " ".join(f"The committee met on day {i} to discuss the budget of the city library." for i in range(8))
    long_passage = f"{filler} A large trial found that wearing masks reduces the spread of COVID-19."
    short = "The Eiffel Tower is in Paris."
    probs, read = verifier.readings(claim, [long_passage, short])
    assert read[1] == short  # a passage of one chunk is read whole
    assert "masks" in read[0] and len(read[0].split()) < len(long_passage.split())
    np.testing.assert_allclose(probs, verifier.batch_probabilities([(claim, [long_passage, short])])[0])


def test_scored_verdicts_of_the_llm_read_the_whole_evidence():
    scorer = KeywordScorer(prior=0.0)
    pipeline = ScoredVerdicts(scorer, ArgMaxDecision(), VerdictSettings(decision="llm"), _messages_fn)
    verdict = pipeline.verdict("A claim.", ["Nothing here.", "The minister denies it."], ["E1", "E2"])
    assert verdict.label is R and verdict.decision == "argmax" and verdict.method == "scored"
    assert "[1] Nothing here." in scorer.explained[-1] and "[2] The minister denies it." in scorer.explained[-1]
    assert set(verdict.label_scores) == {"SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"}
    assert verdict.passage_stances is None and verdict.cited_passages == []  # nothing rests on a passage


def test_stances_reach_the_source_nodes_metadata():
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_carag.ranking.stage import CARAG_METADATA_KEY

    nodes = [NodeWithScore(node=TextNode(text="a", id_="E1", metadata={CARAG_METADATA_KEY: {"rank": 1}}), score=1.0)]
    out = with_stances(nodes, [_stance(1, S, 0.8)])
    found = out[0].node.metadata[CARAG_METADATA_KEY]
    assert {k: found[k] for k in ("rank", "stance", "stance_score")} == {
        "rank": 1,
        "stance": "SUPPORTED",
        "stance_score": 0.8,
    }
    assert set(found["stance_probabilities"]) == {"SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"}
    assert "stance_excerpt" not in found  # a passage read whole has no excerpt
    assert CARAG_METADATA_KEY in out[0].node.excluded_llm_metadata_keys
    assert nodes[0].node.metadata[CARAG_METADATA_KEY] == {"rank": 1}  # copies
    assert with_stances(nodes, None) == nodes


def test_a_long_passages_excerpt_reaches_its_provenance_as_it_stands_in_its_text():
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_carag.ranking.stage import CARAG_METADATA_KEY

    text = "The ministry met on Monday.\nThe minister denies it.  The weather was fine."
    node = NodeWithScore(node=TextNode(text=text, id_="E1", metadata={"source": "x"}), score=1.0)
    read = "source: x\n\nThe ministry met on Monday. The minister denies it."  # the first chunk, read with its header
    (out,) = with_stances([node], [_stance(1, R, 0.8).model_copy(update={"excerpt": read})])
    assert (
        out.node.metadata[CARAG_METADATA_KEY]["stance_excerpt"] == "The ministry met on Monday. The minister denies it."
    )
    assert shown_passage(text, read) == "The ministry met on Monday. The minister denies it. …"
    assert shown_passage(text, "The weather was fine.") == "… The weather was fine."
    assert shown_passage(text, "Nothing of the passage at all.") == " ".join(text.split())
    assert shown_excerpt(text, " ".join(text.split())) is None  # the whole passage: no excerpt
    (again,) = with_stances([out], [_stance(1, R, 0.8)])  # a stance read whole replaces the old excerpt
    assert "stance_excerpt" not in again.node.metadata[CARAG_METADATA_KEY]


def test_scored_verdicts_carry_the_verifiers_confidence_and_temper_the_explanation():
    """The default local LLM's path (score mode): the label's confidence reaches the verdict, as on every other."""
    from dataclasses import replace

    class UnsureVerifier(KeywordVerifier):
        def decide(self, probabilities):
            return replace(super().decide(probabilities), confidence=0.7)

    pipeline = ScoredVerdicts(KeywordScorer(), VerifierDecision(UnsureVerifier()), VerdictSettings(), _messages_fn)
    verdict = pipeline.verdict("A claim.", ["The minister denies it."], ["E1"])
    assert verdict.label is R and verdict.confidence == 0.7
    assert verdict.explanation == "Likely: The passage says so [1]."
