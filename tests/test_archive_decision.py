"""The archive decision: its features, the estimator's declared rule and state, its combination with the LLM,
its fit on an index's labelled claims and its use in the synthesizer."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from llama_index.core.schema import NodeWithScore, TextNode
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import InvalidParameterError

from llama_index_carag.verdicts.decision import (
    ArchiveLabelDecision,
    ArgMaxDecision,
    ScoredEvidence,
    VerdictSettings,
    resolve_decision,
)
from llama_index_carag.verdicts.labels.archive_decision import (
    NO_MODEL,
    ArchiveDecision,
    balanced_accuracy,
    joint_matrix,
    llm_log_proba,
)
from llama_index_carag.verdicts.labels.archive_features import (
    DECLARED_GROUPS,
    ClaimSignals,
    archive_features,
    feature_names,
    negation_mismatch,
    number_mismatch,
    passage_cues,
)
from llama_index_carag.verdicts.types import VerdictLabel

S, R, N = VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO


# ------------------------------------------------------------------ features
def test_features_by_hand() -> None:
    s = ClaimSignals(
        "Sales rose 5% in 2020", [3.0, 4.0], ["Sales did not rise in 2019.", "Sales rose 5% in 2020."], [0.2, 0.6]
    )
    x = archive_features([s])
    names = feature_names(DECLARED_GROUPS, 2)
    got = dict(zip(names, x[0]))
    assert (got["cosine_max"], got["cosine_mean"]) == (pytest.approx(0.6), pytest.approx(0.4))
    assert got["number_mismatch_share"] == pytest.approx(0.5)  # 2019 has none of 5, 2020
    assert got["negation_mismatch_share"] == pytest.approx(0.5)
    assert (got["claim_embedding_0"], got["claim_embedding_1"]) == (pytest.approx(0.6), pytest.approx(0.8))  # unit


def test_cues() -> None:
    assert number_mismatch("It cost 1,200 dollars", "It cost 900 dollars")
    assert not number_mismatch("It cost 1,200 dollars", "It cost 1200 dollars")
    assert not number_mismatch("It cost a lot", "It cost 900 dollars")  # the claim states no number
    assert not number_mismatch("It cost 5", "It was expensive")  # the passage states none
    assert negation_mismatch("Vaccines do not cause autism", "Vaccines cause autism")
    assert not negation_mismatch("It isn't true", "They never did")
    assert passage_cues("It cost 5 and did not work", "It cost 7 and worked") == ["numbers differ", "negation differs"]


def test_bad_signals_are_refused() -> None:
    with pytest.raises(ValueError, match="2 passages but 1 cosines"):
        ClaimSignals("c", [1.0], ["a", "b"], [0.1])
    a, b = ClaimSignals("c", [1.0, 0.0], [], []), ClaimSignals("c", [1.0, 0.0, 0.0], [], [])
    with pytest.raises(ValueError, match="one encoder"):
        archive_features([a, b])
    with pytest.raises(ValueError, match="Unknown feature groups"):
        archive_features([a], ["nope"])


def test_live_signals_read_the_provenance_or_the_node_embedding() -> None:
    with_cos = TextNode(id_="a", text="A.", metadata={"carag": {"claim_similarity": 0.7}})
    with_vec = TextNode(id_="b", text="B.", embedding=[0.0, 1.0])
    s = ClaimSignals.from_nodes("claim", [1.0, 1.0], [NodeWithScore(node=with_cos), NodeWithScore(node=with_vec)])
    assert s.cosines == [pytest.approx(0.7), pytest.approx(1 / math.sqrt(2))]
    with pytest.raises(ValueError, match="neither a claim cosine nor an embedding"):
        ClaimSignals.from_nodes("claim", [1.0], [NodeWithScore(node=TextNode(id_="c", text="C."))])


# ------------------------------------------------------------------ the estimator
def _separable(n_per_label: int = 12, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    centres = {"T": (2.0, 0.0), "F": (-2.0, 0.0), "N": (0.0, 2.0)}
    x = np.vstack([rng.normal(centres[k], 0.5, size=(n_per_label, 2)) for k in "TFN"])
    return x, [k for k in "TFN" for _ in range(n_per_label)]


def test_keeps_a_model_that_beats_chance_out_of_fold() -> None:
    x, y = _separable()
    d = ArchiveDecision().fit(x, y)
    assert d.has_model and d.choice_.startswith("C=") and d.fallback_ is None
    assert d.cv_gain_ > 0.5 and set(d.cv_scores_) == {"C=0.001", "C=0.01", "C=0.1", "C=1"}
    assert list(d.predict(x[[0, 12, 24]])) == ["SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"]
    assert "fitted on 36 labelled claims" in d.reason()


def test_no_model_when_near_chance() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(300, 3)), [k for k in "TFN" for _ in range(100)]
    d = ArchiveDecision().fit(x, y)
    assert d.choice_ == NO_MODEL and d.fallback_ == "no_gain" and not d.has_model
    assert np.allclose(d.model_log_proba(x[:2]), -np.log(3))  # uniform: the LLM decides alone
    assert "near chance" in d.reason()


def test_too_few_labelled_claims_give_no_model_without_cv() -> None:
    x, y = _separable(n_per_label=5)
    d = ArchiveDecision().fit(x, y)
    assert d.fallback_ == "too_few" and d.cv_scores_ == {} and d.n_splits_ == 0
    assert "fewer than 24" in d.reason()


def test_the_llm_scores_with_the_lean_divided_out_join_the_model() -> None:
    joint = joint_matrix([{S: -0.1, R: -3.0, N: -3.0}])
    lean = {S: 0.98, R: 0.01, N: 0.01}
    assert llm_log_proba(joint).argmax() == 0  # plain arg-max: SUPPORTED
    assert llm_log_proba(joint, lean).argmax() != 0  # an archive that leans SUPPORTED
    x, y = _separable()
    d = ArchiveDecision().fit(x, y)
    refuted_row = x[[12]]
    assert d.predict(refuted_row)[0] == "REFUTED"
    strong_s = joint_matrix([{S: 0.0, R: -30.0, N: -30.0}])
    assert d.predict(refuted_row, strong_s)[0] == "SUPPORTED"  # a product of experts: a sure LLM wins
    p = d.predict_proba(refuted_row, joint, lean)
    assert p.shape == (1, 3) and p.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="positive probability"):
        llm_log_proba(joint, {S: 1.0})


def test_state_round_trips_through_json() -> None:
    x, y = _separable()
    d = ArchiveDecision(Cs=(0.1, 1.0)).fit(x, y, feature_names=["a", "b"])
    back = ArchiveDecision.from_state(json.loads(json.dumps(d.get_state())))
    assert np.allclose(back.predict_proba(x), d.predict_proba(x))
    assert back.reason() == d.reason() and back.feature_names_ == ["a", "b"]
    with pytest.raises(ValueError, match="Not a carag-archive-decision/2 state"):
        ArchiveDecision.from_state({"format": "other"})


def test_estimator_checks() -> None:
    with pytest.raises(NotFittedError):
        ArchiveDecision().predict(np.zeros((1, 2)))
    with pytest.raises(InvalidParameterError):
        ArchiveDecision(max_folds=1).fit(*_separable())
    with pytest.raises(ValueError, match="positive numbers"):
        ArchiveDecision(Cs=(0.0,)).fit(*_separable())
    with pytest.raises(ValueError, match="finite 2-D"):
        ArchiveDecision().fit(np.array([[np.nan, 1.0]]), ["T"])
    d = ArchiveDecision().fit(*_separable())
    with pytest.raises(ValueError, match="fitted on 2"):
        d.predict(np.zeros((1, 3)))
    assert balanced_accuracy(["T", "T", "F"], ["T", "F", "F"]) == pytest.approx(0.75)


# ------------------------------------------------------------------ in the synthesizer's decision layer
def test_archive_label_decision_reads_the_claim_embedding_and_names_the_cues() -> None:
    claim = "The plant did not close in 2020"
    texts = ["The plant closed in 2021.", "Unrelated text."]
    vec = [1.0, 0.0, 0.0]
    sig = ClaimSignals(claim, vec, texts, [0.8, 0.1])
    x = np.vstack([archive_features([sig])] * 3)
    x = x + np.random.default_rng(0).normal(0, 0.01, x.shape)
    archive = ArchiveDecision().fit(np.repeat(x, 10, axis=0), ["F", "T", "N"] * 10)  # near chance: no model
    decision = resolve_decision(VerdictSettings(decision="llm"), None, None, archive_decision=archive)
    assert isinstance(decision, ArchiveLabelDecision) and decision.needs >= {"embedding", "cosines", "joint"}
    evidence = ScoredEvidence(
        claim, texts, ["a", "b"], joint={S: -3.0, R: -0.1, N: -3.0}, cosines=[0.8, 0.1], claim_embedding=vec
    )
    made = decision.decide(evidence)
    assert made.label == R and made.passages[0] == 1
    assert "[1] numbers differ and negation differs" in made.reason
    with pytest.raises(ValueError, match="'claim_embedding'"):
        decision.decide(ScoredEvidence(claim, texts, ["a", "b"], joint={S: 0.0, R: -1.0, N: -1.0}, cosines=[0.8, 0.1]))
    assert isinstance(resolve_decision(VerdictSettings(decision="llm"), None, None), ArgMaxDecision)  # no archive
    with pytest.raises(ValueError, match="needs the index's archive decision"):
        resolve_decision(VerdictSettings(decision="archive"), None, None)
