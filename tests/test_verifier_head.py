"""The archive's claim-level head on the verifier's passage probabilities."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from llama_index_carag.verdicts.types import LABELS
from llama_index_carag.verifier.config import VerifierConfig
from llama_index_carag.verifier.head import FEATURE_NAMES, LabelHead, claim_features
from llama_index_carag.verifier.model import SHIPPED_DIR, ClaimVerifier, decide_label


def _leaning_claims(n: int = 90, seed: int = 0) -> tuple[list[np.ndarray], list[str]]:
    """Claims whose passages lean REFUTED, as the shipped verifier's do on a new domain: a SUPPORTED claim's
    support is weak, an unrelated passage still reads as half refuting."""
    rng = np.random.default_rng(seed)
    probs, gold = [], []
    for i in range(n):
        label = LABELS[i % 3]
        base = {"SUPPORTED": [0.35, 0.55, 0.10], "REFUTED": [0.05, 0.85, 0.10], "NOT_ENOUGH_INFO": [0.05, 0.6, 0.35]}
        rows = np.clip(np.asarray(base[label]) + rng.normal(0, 0.04, size=(4, 3)), 1e-3, None)
        probs.append(rows / rows.sum(axis=1, keepdims=True))
        gold.append(label)
    return probs, gold


def test_claim_features_are_the_max_and_mean_per_label():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    assert list(claim_features(probs)) == pytest.approx([0.7, 0.3, 0.6, 0.4, 0.25, 0.35])
    assert list(claim_features(np.zeros((0, 3)))) == [0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    assert len(FEATURE_NAMES) == 6


def test_the_head_learns_a_lean_the_threshold_rule_cannot_move():
    train_probs, train_gold = _leaning_claims(seed=0)
    test_probs, test_gold = _leaning_claims(seed=1)
    head = LabelHead().fit(train_probs, train_gold)
    by_head = head.predict(test_probs)
    by_rule = [decide_label(p, 0.5).label for p in test_probs]
    assert np.mean(by_head == np.asarray(test_gold)) >= 0.95
    assert np.mean([a == b for a, b in zip(by_rule, test_gold)]) <= 0.4  # the rule says REFUTED for all
    assert np.allclose(head.predict_proba(test_probs).sum(axis=1), 1.0)


def test_a_head_round_trips_through_its_numbers():
    probs, gold = _leaning_claims()
    head = LabelHead().fit(probs, gold)
    again = LabelHead.from_dict(json.loads(json.dumps(head.to_dict())))
    assert np.allclose(again.predict_proba(probs), head.predict_proba(probs), atol=1e-6)
    with pytest.raises(ValueError, match="this version reads"):
        LabelHead.from_dict({**head.to_dict(), "features": ["max_SUPPORTED"]})


def test_a_head_needs_every_label_and_matching_lengths():
    probs, gold = _leaning_claims()
    with pytest.raises(ValueError, match="missing"):
        LabelHead().fit(probs[:2], ["SUPPORTED", "REFUTED"])
    with pytest.raises(ValueError, match="claims"):
        LabelHead().fit(probs, gold[:-1])
    with pytest.raises(NotFittedError):
        LabelHead().predict(probs)


def test_decide_label_with_a_head_says_so_and_rests_on_the_labels_passages():
    probs, gold = _leaning_claims()
    head = LabelHead().fit(probs, gold)
    claim = np.array([[0.37, 0.53, 0.10], [0.30, 0.60, 0.10], [0.33, 0.57, 0.10]])
    found = decide_label(claim, 0.5, head)
    assert found.label == "SUPPORTED" and "head" in found.reason
    assert found.passages[0] == 1
    assert decide_label(claim, 0.5).label == "REFUTED"


def test_a_verifier_folder_with_a_head_decides_with_it(tmp_path):
    probs, gold = _leaning_claims()
    head = LabelHead().fit(probs, gold)
    folder = tmp_path / "verifier"
    folder.mkdir()
    config = VerifierConfig.read(SHIPPED_DIR).model_copy(update={"weights": "shipped", "head": head.to_dict()})
    (folder / "verifier.json").write_text(config.to_json_text())
    verifier = ClaimVerifier(folder)
    assert verifier.head is not None and verifier.weights_dir == SHIPPED_DIR
    assert verifier.decide(np.array([[0.36, 0.54, 0.10]])).label == "SUPPORTED"
    assert ClaimVerifier().head is None


def test_a_saved_verifier_keeps_its_head(tmp_path):
    probs, gold = _leaning_claims()
    folder = tmp_path / "weights"
    shutil.copytree(SHIPPED_DIR, folder)
    verifier = ClaimVerifier(folder)
    verifier.head = LabelHead().fit(probs, gold)
    saved = ClaimVerifier(verifier.save(tmp_path / "saved"))
    assert saved.head is not None
    assert np.allclose(saved.head.coef_, verifier.head.coef_, atol=1e-6)
