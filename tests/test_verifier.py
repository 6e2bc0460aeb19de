"""The claim verifier: its decision rule, chunking, training pairs, the shipped weights and the synthesizer's
default decision (the verifier decides, the LLM explains)."""

from __future__ import annotations

import numpy as np
import pytest

from llama_index_carag.verdicts.types import LABELS
from llama_index_carag.verifier.config import VerifierConfig
from llama_index_carag.verifier.model import (
    SHIPPED_DIR,
    ClaimVerifier,
    chunk_passage,
    decide_label,
    write_verifier_folder,
)
from llama_index_carag.verifier.pairs import Pair, is_validation, mine_unrelated, read_pairs
from llama_index_carag.verifier.training import (
    REFERENCE_PAIRS,
    choose_threshold,
    claim_groups,
    pair_macro_f1,
    sample_claims,
)


# ------------------------------------------------------------------ the rule
def test_decide_label_strongest_support_against_strongest_refutation():
    probs = np.array([[0.2, 0.1, 0.7], [0.8, 0.1, 0.1], [0.1, 0.6, 0.3]])
    found = decide_label(probs, 0.5)
    assert found.label == "SUPPORTED" and found.passages == (2,)
    assert "[2] supports" in found.reason
    found = decide_label(probs[[0, 2]], 0.5)
    assert found.label == "REFUTED" and found.passages[0] == 2


def test_decide_label_not_enough_info_below_the_threshold_and_without_passages():
    probs = np.array([[0.4, 0.3, 0.3], [0.1, 0.2, 0.7]])
    found = decide_label(probs, 0.45)
    assert found.label == "NOT_ENOUGH_INFO" and "0.40 < 0.45" in found.reason
    assert decide_label(probs, 0.40).label == "SUPPORTED"  # at the threshold a stance counts
    assert decide_label(np.zeros((0, 3)), 0.5).label == "NOT_ENOUGH_INFO"


def test_chunk_passage_keeps_short_passages_and_cuts_long_ones_into_whole_sentences():
    assert chunk_passage("One short passage.", 10) == ["One short passage."]
    text = " ".join(f"Sentence number {i} has exactly seven words." for i in range(6))
    chunks = chunk_passage(text, 15)
    assert len(chunks) == 3 and all(len(c.split()) <= 15 for c in chunks)
    assert " ".join(chunks) == text  # nothing lost, sentences whole


# -------------------------------------------------------------- training data
def test_read_pairs_rejects_an_unknown_label(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text("dataset,claim_id,claim,evidence_id,evidence,label\nd,c1,A claim,e1,A passage,MAYBE\n")
    with pytest.raises(ValueError, match="MAYBE"):
        read_pairs(path)


def test_validation_split_is_by_claim_and_stable():
    ids = [f"claim-{i}" for i in range(2000)]
    share = np.mean([is_validation(i, 0.1) for i in ids])
    assert 0.07 < share < 0.13
    assert [is_validation(i, 0.1) for i in ids[:50]] == [is_validation(i, 0.1) for i in ids[:50]]


def _pool() -> list[Pair]:
    rows = [
        ("c1", "Paris is the capital of France.", "Paris is the capital and largest city of France.", "SUPPORTED"),
        ("c2", "Paris is the capital of Spain.", "Paris is the capital and largest city of France.", "REFUTED"),
        ("c3", "The Nile is the longest river.", "The Nile is a major river flowing north in Africa.", "SUPPORTED"),
        ("c4", "Rivers in Africa flow north.", "Many rivers cross the Sahel before reaching the sea.", "REFUTED"),
    ]
    return [Pair(i, c, p, lab, "toy") for i, c, p, lab in rows]


def test_mined_pairs_never_use_a_passage_of_the_claims_own_group():
    pool = _pool()
    mined = mine_unrelated(pool, {"toy": 4}, name_free=())
    assert mined and all(p.label == "NOT_ENOUGH_INFO" and p.source == "mined" for p in mined)
    own = {"c1": {"Paris is the capital and largest city of France."}}
    own["c2"] = own["c1"]  # c1 and c2 share a passage: one group
    for p in mined:
        assert p.passage not in own.get(p.claim_id, set())


def test_mining_leaves_out_passages_naming_the_claims_names():
    pool = _pool()
    mined = mine_unrelated(pool, {"toy": 4}, name_free=("toy",))
    for p in mined:
        names = {w for w in p.claim.split() if w[0].isupper() and len(w) > 2} - {"The"}
        assert not any(n.strip(".") in p.passage for n in names)


def test_sample_claims_keeps_whole_claims():
    pool = _pool() + [Pair("c1", "Paris is the capital of France.", "Another passage.", "SUPPORTED", "toy")]
    kept = sample_claims(pool, {"toy": 2}, seed=0)
    ids = {p.claim_id for p in kept}
    assert len(ids) == 2 and all(p in kept for p in pool if p.claim_id in ids)


def test_claim_groups_label_claims_and_skip_disputed_ones():
    pairs = [
        Pair("a", "A", "p1", "SUPPORTED", "d"),
        Pair("a", "A", "p2", "NOT_ENOUGH_INFO", "d"),
        Pair("b", "B", "p3", "SUPPORTED", "d"),
        Pair("b", "B", "p4", "REFUTED", "d"),
        Pair("c", "C", "p5", "NOT_ENOUGH_INFO", "d"),
        Pair("a", "A", "p9", "NOT_ENOUGH_INFO", "mined"),
    ]
    groups = claim_groups(pairs)
    assert ("A", ["p1", "p2"], "SUPPORTED") in groups and ("C", ["p5"], "NOT_ENOUGH_INFO") in groups
    assert ("A", ["p9"], "NOT_ENOUGH_INFO") in groups and not any(c == "B" for c, _, _ in groups)


def test_choose_threshold_finds_the_separating_threshold():
    probs = [np.array([[0.9, 0.05, 0.05]]), np.array([[0.1, 0.8, 0.1]]), np.array([[0.55, 0.1, 0.35]])]
    threshold, figures = choose_threshold(probs, ["SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"])
    assert 0.55 < threshold <= 0.80 and figures["accuracy"] == 1.0
    assert pair_macro_f1([0, 1, 2], [0, 1, 1]) == pytest.approx((1 + 2 / 3 + 0) / 3)


# ------------------------------------------------------------- shipped model
def test_the_shipped_verifier_loads_offline_and_reproduces_its_cards_outputs():
    config = VerifierConfig.read(SHIPPED_DIR)
    assert config.labels == LABELS and config.weights == "own" and (SHIPPED_DIR / "MODEL_CARD.md").is_file()
    weights = SHIPPED_DIR / "model.safetensors"
    assert weights.stat().st_size < 100 * 2**20  # float16, well under 100 MB
    reference = config.record["reference_outputs"]
    assert [(r["claim"], r["passage"]) for r in reference] == list(REFERENCE_PAIRS)
    verifier = ClaimVerifier()
    got = verifier.pair_probabilities([(r["claim"], r["passage"]) for r in reference])
    np.testing.assert_allclose(got, [r["probabilities"] for r in reference], atol=2e-3)
    assert np.allclose(got.sum(axis=1), 1.0)


def test_the_shipped_verifier_reads_support_refutation_and_unrelated_text():
    verifier = ClaimVerifier()
    probs = verifier.pair_probabilities(list(REFERENCE_PAIRS[:3]))
    assert probs[0].argmax() == 0  # coral bleaching: supported
    assert probs[1].argmax() == 1  # the Eiffel Tower in Berlin: refuted
    assert probs[2].argmax() == 2  # a road budget says nothing of vitamin C


def test_a_folder_without_verifier_json_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a verifier folder"):
        ClaimVerifier(tmp_path)


def test_a_bad_verifier_json_is_a_clear_error_naming_the_file(tmp_path):
    (tmp_path / "verifier.json").write_text('{"threshold": 0.5, "rule": "vote"}')
    with pytest.raises(ValueError, match=r"verifier\.json: not a valid verifier config.*rule"):
        ClaimVerifier(tmp_path)
    (tmp_path / "verifier.json").write_text("{")
    with pytest.raises(ValueError, match="not a valid verifier config"):
        VerifierConfig.read(tmp_path)
    (tmp_path / "verifier.json").write_text('{"labels": ["REFUTED", "SUPPORTED", "NOT_ENOUGH_INFO"]}')
    with pytest.raises(ValueError, match="labels"):
        ClaimVerifier(tmp_path)


def test_a_saved_verifier_round_trips_its_config_and_record(tmp_path):
    adapted = ClaimVerifier()
    adapted.threshold, adapted.refuted_threshold = 0.7, 0.6
    config = adapted.to_config(domain_check={"claims": 30})
    assert config.weights == "shipped"  # a verifier on the shipped weights names them, never copies them
    assert config.record["domain_check"] == {"claims": 30} and "training" in config.record
    with pytest.raises(ValueError, match="own weights"):
        write_verifier_folder(tmp_path / "v", config.model_copy(update={"weights": "own"}))  # own, none given
    adapted.save(tmp_path / "v", name_shipped=True, domain_check={"claims": 30})
    assert sorted(p.name for p in (tmp_path / "v").iterdir() if not p.name.startswith(".carag-")) == ["verifier.json"]
    loaded = ClaimVerifier(tmp_path / "v")
    assert loaded.to_config() == config and loaded.weights_dir == SHIPPED_DIR
    assert (loaded.threshold, loaded.refuted_threshold) == (0.7, 0.6) and loaded.fitted_by == "the domain check"


def test_a_threshold_out_of_range_is_rejected():
    with pytest.raises(ValueError, match="threshold"):
        ClaimVerifier(threshold=1.5)


def test_a_verifier_trained_in_place_is_saved_with_its_weights(tmp_path):
    """Weights are written unless the shipped ones are named on purpose: a model changed in memory is never
    saved as a config that names the shipped weights (its training lost), and the shipped folder is never
    overwritten by a config naming itself."""
    import torch

    verifier = ClaimVerifier()
    pair = [("The vaccine was approved in 2021.", "Regulators approved the vaccine in 2021.")]
    before = verifier.pair_probabilities(pair)
    with torch.no_grad():  # "training" in place: the classifier's bias moves
        head = [p for n, p in verifier.cross_encoder.model.named_parameters() if n.endswith("bias")][-1]
        head += torch.tensor([3.0, -3.0, 0.0])
    changed = verifier.pair_probabilities(pair)
    assert not np.allclose(before, changed, atol=1e-3)
    saved = ClaimVerifier(verifier.save(tmp_path / "trained", training={"note": "in place"}))
    assert saved.weights_dir == tmp_path / "trained" and not saved.shipped_weights
    assert np.allclose(saved.pair_probabilities(pair), changed, atol=2e-2)  # float16 on disk
    with pytest.raises(ValueError, match="shipped weights"):
        ClaimVerifier().save(SHIPPED_DIR, name_shipped=True)
    with pytest.raises(ValueError, match="weights of its own"):
        saved.save(tmp_path / "named", name_shipped=True)
    assert np.allclose(ClaimVerifier().pair_probabilities(pair), before, atol=1e-6)  # the shipped folder intact


def test_a_verifier_folder_written_again_before_the_weights_load_is_refused(tmp_path):
    """Settings are read at construction, weights on first use: a re-fit in between would pair old thresholds
    with new weights, so the load refuses and says to load the verifier again."""
    folder = tmp_path / "v"
    ClaimVerifier().save(folder, name_shipped=True, domain_check={"claims": 30})
    verifier = ClaimVerifier(folder)  # settings read; weights not yet loaded
    refit = VerifierConfig.read(folder).model_copy(update={"threshold": 0.8})
    write_verifier_folder(folder, refit)
    verifier.weights_dir = folder  # as a folder with weights of its own
    with pytest.raises(ValueError, match="written again since this verifier read its settings"):
        _ = verifier.cross_encoder
    assert ClaimVerifier(folder).threshold == 0.8
