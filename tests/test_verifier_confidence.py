"""Calibrated confidence, cost-weighted abstention, tempered explanations and label suggestions."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from llama_index_carag.datasets import demo_corpus_path
from llama_index_carag.verdicts.explanation_checks import SURE, temper_explanation
from llama_index_carag.verdicts.types import confidence_words
from llama_index_carag.verifier.confidence import LabelConfidence
from llama_index_carag.verifier.model import MIN_CONFIDENCE, ClaimVerifier, decide_label
from llama_index_carag.verifier.suggest import suggest_labels, torn
from tests.helpers import run_cli


def _labelled(n: int, seed: int = 0) -> tuple[list[tuple[str, float]], list[bool]]:
    """Raw scores whose chance of being right rises with the score (P = score), for every label."""
    rng = np.random.default_rng(seed)
    X, y = [], []
    for label in ("SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"):
        for s in rng.uniform(0.3, 1.0, n):
            X.append((label, float(s)))
            y.append(bool(rng.uniform() < s))
    return X, y


def test_confidence_rises_with_the_score_and_round_trips():
    X, y = _labelled(400)
    fitted = LabelConfidence().fit(X, y)
    for label in ("SUPPORTED", "REFUTED"):
        low, high = fitted.predict(label, 0.4), fitted.predict(label, 0.95)
        assert 0.25 < low < 0.55 < high < 1.0  # near P = score
    again = LabelConfidence.from_dict(fitted.to_dict())
    assert again.predict("REFUTED", 0.7) == pytest.approx(fitted.predict("REFUTED", 0.7), abs=1e-5)


def test_a_label_with_few_claims_or_one_outcome_gets_its_shrunk_rate():
    X = [("SUPPORTED", 0.9)] * 3 + [("REFUTED", s) for s in np.linspace(0.5, 1, 20)]
    y = [True, True, False] + [True] * 20
    fitted = LabelConfidence().fit(X, y)
    assert fitted.predict("SUPPORTED", 0.1) == pytest.approx(3 / 5) == fitted.predict("SUPPORTED", 0.99)
    assert fitted.predict("REFUTED", 0.5) == pytest.approx(21 / 22)  # one outcome only: no slope
    assert fitted.predict("NOT_ENOUGH_INFO", 0.5) == pytest.approx(0.5)  # no claims at all
    with pytest.raises(ValueError, match="labels"):
        LabelConfidence().fit([("MAYBE", 0.5)], [True])


def test_a_label_under_the_confidence_it_needs_is_withheld():
    verifier = ClaimVerifier()
    probs = np.array([[0.05, 0.62, 0.33], [0.1, 0.2, 0.7]])
    plain = decide_label(probs, verifier.threshold)
    assert plain.label == "REFUTED" and plain.score == pytest.approx(0.62)
    verifier.confidence = LabelConfidence.from_dict(
        {k: {"coef": 0.0, "intercept": -1.0, "claims": 50} for k in ("SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO")}
    )  # every label right 27% of the time
    found = verifier.decide(probs)
    assert found.label == "NOT_ENOUGH_INFO" and found.confidence == pytest.approx(1 / (1 + np.e))
    assert "REFUTED" in found.reason and f"{MIN_CONFIDENCE:.0%}" in found.reason
    verifier.confidence = LabelConfidence.from_dict(
        {k: {"coef": 0.0, "intercept": 2.0, "claims": 50} for k in ("SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO")}
    )
    kept = verifier.decide(probs)
    assert kept.label == "REFUTED" and kept.confidence == pytest.approx(1 / (1 + np.exp(-2.0)))


def test_the_shipped_verifier_gives_a_calibrated_confidence():
    verifier = ClaimVerifier()
    assert verifier.confidence is not None  # fitted on the pool's validation claims
    found = verifier.label(
        "The Eiffel Tower is in Berlin.",
        ["The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France."],
    )
    assert found.label == "REFUTED" and 0.5 <= found.confidence <= 1.0


def test_mean_rule_reads_the_passages_mean():
    probs = np.array([[0.9, 0.05, 0.05], [0.1, 0.1, 0.8], [0.1, 0.1, 0.8]])
    assert decide_label(probs, 0.5).label == "SUPPORTED"
    mean = decide_label(probs, 0.5, rule="mean")
    assert mean.label == "NOT_ENOUGH_INFO" and mean.score == pytest.approx(0.55)
    with pytest.raises(ValueError, match="rule"):
        decide_label(probs, 0.5, rule="vote")


def test_an_explanation_never_sounds_surer_than_its_label():
    text = "Passage [1] clearly proves that the tower is in Paris."
    tempered = temper_explanation(text, 0.62)
    assert tempered.startswith("More likely than not: ")
    assert "clearly" not in tempered and "proves" not in tempered and "suggests" in tempered and "[1]" in tempered
    assert temper_explanation(text, SURE) == text and temper_explanation(text, None) == text
    linked = "Passage [1] directly links ultra-processed food to obesity. This supports the claim."
    assert temper_explanation(linked, 0.81) == (
        "Likely: Passage [1] links ultra-processed food to obesity. This appears to support the claim."
    )
    assert temper_explanation("It refutes and contradicts it.", 0.6).endswith(
        "appears to refute and appears to contradict it."
    )


@pytest.mark.parametrize(
    ("text", "tempered"),
    [  # a negation keeps the word: dropping it would make the claim stronger
        ("The passage does not fully support the claim.", "The passage does not fully support the claim."),
        ("It isn't clearly shown to work [1].", "It isn't clearly shown to work [1]."),
        ("It cannot be proven.", "It cannot be proven."),
        ("None of the passages fully supports it.", "None of the passages fully supports it."),
        ("It fails to fully support it.", "It fails to fully support it."),
        ("It does not say the dam is fully safe.", "It does not say the dam is fully safe."),
        # a softened word keeps the comma after it and its capital
        ("This supports, in part, the claim.", "This appears to support, in part, the claim."),
        ("Shows that the dam holds [2].", "Indicates that the dam holds [2]."),
        # a removed word takes one comma with it and leaves its sentence a capital
        ("Clearly, the tower is in Paris.", "The tower is in Paris."),
        ("The data, clearly, confirms it. Definitely shown.", "The data suggests it. Indicated."),
        ("It is shown clearly.", "It is indicated."),
        ("It is true, clearly.", "It is true."),
        ("Definitely. The passage shows it.", "The passage indicates it."),
        ("It shows, clearly, that the dam holds.", "It indicates that the dam holds."),
    ],
)
def test_tempering_keeps_negations_commas_and_capitals(text, tempered):
    assert temper_explanation(text, 0.62) == f"More likely than not: {tempered}"
    assert confidence_words(0.93) == "very likely, 93%" and confidence_words(None) == ""


class _Torn:
    """A verifier stub: claims containing 'torn' read half S, half R; others surely S."""

    def batch_probabilities(self, items):
        return [np.array([[0.45, 0.45, 0.1]]) if "torn" in c else np.array([[0.98, 0.01, 0.01]]) for c, _ in items]


def test_suggestions_take_the_most_torn_claims_in_turns_over_the_clusters():
    claims = [
        ("a", "sure a", 0, ["p"]),
        ("b", "torn b", 0, ["p"]),
        ("c", "torn c", 0, ["p"]),
        ("d", "sure d", 1, ["p"]),
        ("e", "torn e", 1, ["p"]),
    ]
    chosen = suggest_labels(claims, 3, verifier=_Torn())
    assert [s.claim_id for s in chosen] == ["b", "e", "c"]
    assert chosen[0].entropy == pytest.approx(torn(np.array([[0.45, 0.45, 0.1]])))
    with pytest.raises(ValueError):
        suggest_labels(claims, 0, verifier=_Torn())


def test_carag_index_suggests_labels_for_unlabelled_claims(tmp_path):
    rows = list(csv.DictReader(demo_corpus_path().read_text(encoding="utf-8").splitlines()))
    for row in rows:
        row["Label"] = ""
    data = tmp_path / "unlabelled.csv"
    with open(data, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = tmp_path / "index"
    proc = run_cli("index", str(data), "--out", str(out), "--clusters", "3", "--suggest-labels", "4")
    assert proc.returncode == 0, proc.stderr
    assert "label these 4 claims first" in proc.stdout
    written = list(csv.DictReader((out / "suggested_labels.csv").read_text(encoding="utf-8").splitlines()))
    assert len(written) == 4 and all(r["label"] == "" and r["claim"] for r in written)
    assert len({r["cluster"] for r in written}) > 1  # spread over the clusters
    bad = run_cli("index", str(data), "--out", str(tmp_path / "x"), "--suggest-labels", "0")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
