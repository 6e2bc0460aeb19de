"""The measured label rule: features, fitting, its JSON, and when the synthesizer applies it."""

from __future__ import annotations

import numpy as np
import pytest

from llama_index_carag.verdicts import VerdictLabel
from llama_index_carag.verdicts.labels.rules import (
    EvidenceLabelRule,
    evidence_cosines,
    load_rules,
    measured_rule,
    rule_features,
)

from .helpers import TableEmbedding

S, R, N = VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO


def test_features_are_normalised_log_likelihoods_and_cosines():
    x = rule_features({S: -1.0, R: -2.0, N: -3.0}, [0.2, 0.6])
    assert x.shape == (5,) and np.isclose(np.exp(x[:3]).sum(), 1.0)
    assert np.allclose(x[:3] - x[0], [0.0, -1.0, -2.0]) and np.allclose(x[3:], [0.6, 0.4])
    assert np.allclose(rule_features({S: 0.0, R: 0.0, N: 0.0}, [])[3:], [0.0, 0.0])


def test_evidence_cosines_with_an_embed_model():
    embed = TableEmbedding({"claim": [1.0, 0.0], "same": [2.0, 0.0], "orthogonal": [0.0, 3.0]})
    assert np.allclose(evidence_cosines(embed, "claim", ["same", "orthogonal"]), [1.0, 0.0])
    assert evidence_cosines(embed, "claim", []).shape == (0,)


def test_fit_predict_and_json_round_trip():
    rng = np.random.default_rng(0)
    gold = ["T", "F", "N"] * 20
    feats = np.array(
        [rule_features({S: -3.0 + 3 * (g == "T"), R: -3.0 + 3 * (g == "F"), N: -2.0}, [rng.uniform()]) for g in gold]
    )
    rule = EvidenceLabelRule.fit(feats, gold, encoder="enc", note="test")
    assert rule.predict({S: 0.0, R: -3.0, N: -2.0}, [0.5]) is S
    assert rule.predict({S: -3.0, R: 0.0, N: -2.0}, [0.5]) is R
    assert rule.predict({S: -3.0, R: -3.0, N: -2.0}, [0.5]) is N
    rows = np.array(
        [rule_features({S: 0.0, R: -3.0, N: -2.0}, [0.5]), rule_features({S: -3.0, R: -3.0, N: -2.0}, [0.2, 0.9])]
    )
    assert rule.predict_features(rows) == [
        rule.predict({S: 0.0, R: -3.0, N: -2.0}, [0.5]),
        rule.predict({S: -3.0, R: -3.0, N: -2.0}, [0.2, 0.9]),
    ]
    again = EvidenceLabelRule.from_dict(rule.to_dict())
    assert again == EvidenceLabelRule(rule.encoder, rule.coef, rule.intercept, {"note": "test"})
    with pytest.raises(ValueError, match="shape"):
        EvidenceLabelRule("enc", ((1.0,),), (0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="all three labels"):
        EvidenceLabelRule.fit(feats[:2], ["T", "F"], encoder="enc")


def test_the_shipped_rule_is_for_the_llamacpp_qwen_with_minilm():
    rules = load_rules()
    rule = measured_rule("Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, llama.cpp)")
    assert rule is not None and rule.encoder == "sentence-transformers/all-MiniLM-L6-v2"
    assert rule.info["cv_macro_F1"] >= rule.info["cv_macro_F1_raw_argmax"] + 0.03  # the declared margin
    assert measured_rule("Qwen2.5-Coder-1.5B-Instruct") is None and measured_rule(None) is None
    assert set(rules) == {"Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, llama.cpp)"}
