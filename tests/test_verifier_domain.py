"""The domain check: per-label thresholds in the decision, fitted on a corpus's claims without labels."""

from __future__ import annotations

import numpy as np
import pytest

from llama_index_carag.verifier.domain import MIN_CLAIMS, DomainThresholds, fit_domain_verifier
from llama_index_carag.verifier.model import ClaimVerifier, decide_label


def test_one_threshold_rule_unchanged_and_refuted_threshold_apart():
    probs = np.array([[0.2, 0.7, 0.1], [0.55, 0.3, 0.15]])
    assert decide_label(probs, 0.5).label == "REFUTED"  # both pass, the larger wins
    assert decide_label(probs, 0.5, refuted_threshold=0.5).label == "REFUTED"
    assert decide_label(probs, 0.5, refuted_threshold=0.8).label == "SUPPORTED"  # refutation not strong enough
    assert decide_label(probs, 0.5, refuted_threshold=0.65).label == "SUPPORTED"  # 0.05 above against 0.05
    found = decide_label(probs, 0.6, refuted_threshold=0.8)
    assert found.label == "NOT_ENOUGH_INFO" and "support 0.55 < 0.60, refutation 0.70 < 0.80" in found.reason


def test_domain_thresholds_cap_each_label_share():
    rng = np.random.default_rng(0)
    leaning = [
        np.column_stack([rng.uniform(0, 0.6, 6), rng.uniform(0.4, 1.0, 6), rng.uniform(0, 1, 6)]) for _ in range(200)
    ]
    fitted = DomainThresholds(share=0.25, floor=0.5).fit(leaning)
    assert fitted.lean_["REFUTED"] > 0.9  # the floor alone calls nearly every claim REFUTED
    labels = [decide_label(p, fitted.supported_, refuted_threshold=fitted.refuted_).label for p in leaning]
    assert np.mean([p[:, 1].max() >= fitted.refuted_ for p in leaning]) == pytest.approx(0.25, abs=0.01)
    assert 0.15 < labels.count("REFUTED") / len(labels) <= 0.26
    assert fitted.supported_ == pytest.approx(np.quantile([p[:, 0].max() for p in leaning], 0.75))
    quiet = [np.array([[0.1, 0.1, 0.8]])] * 30
    assert DomainThresholds(floor=0.5).fit(quiet).refuted_ == 0.5  # never below the floor
    with pytest.raises(ValueError):
        DomainThresholds(share=1.5).fit(leaning)
    with pytest.raises(ValueError):
        DomainThresholds().fit([])


def test_fit_domain_verifier_writes_a_loadable_folder(tmp_path):
    passage = ["Wind farms were built offshore in the North Sea."]
    claims = [(f"Offshore wind farm {i} harms fish.", passage) for i in range(MIN_CLAIMS)]
    assert fit_domain_verifier(claims[:-1], tmp_path / "few") is None
    assert not (tmp_path / "few").exists()
    record = fit_domain_verifier(claims, tmp_path / "v")
    loaded = ClaimVerifier(tmp_path / "v")
    assert record is not None and record["claims"] == MIN_CLAIMS
    assert loaded.weights_dir == ClaimVerifier().weights_dir  # thresholds only: the shipped weights
    assert (loaded.threshold, loaded.refuted_threshold) == (record["supported"], record["refuted"])
    assert min(loaded.threshold, loaded.refuted_threshold) >= ClaimVerifier().threshold


def test_fit_index_verifier_is_the_domain_check_without_calibrate(tmp_path):
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_carag.verifier.archive import fit_index_verifier
    from llama_index_carag.verifier.model import index_verifier

    class Retriever:  # the passages a retriever would give every claim
        def retrieve(self, claim):
            return [NodeWithScore(node=TextNode(text="Wind farms were built offshore in the North Sea."), score=1.0)]

    claims = [TextNode(text=f"Offshore wind farm {i} harms fish.", id_=f"c{i}") for i in range(MIN_CLAIMS)]
    assert fit_index_verifier(Retriever(), claims[:-1], tmp_path / "few") is None
    assert index_verifier(tmp_path / "few") is None  # the shipped verifier stays
    record = fit_index_verifier(Retriever(), claims, tmp_path / "index")
    assert record is not None and record["kind"] == "domain" and record["claims"] == MIN_CLAIMS
    assert index_verifier(tmp_path / "index").threshold == record["supported"]


def test_calibrate_with_too_few_labels_keeps_what_the_index_gets_without_them(tmp_path):
    """``--calibrate``'s fallback is the out-of-the-box verifier: the domain check on the corpus's claims."""
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_carag.verifier.archive import MIN_HEAD, fit_index_verifier
    from llama_index_carag.verifier.model import index_verifier

    class Retriever:
        def retrieve(self, claim):
            return [NodeWithScore(node=TextNode(text="Wind farms were built offshore in the North Sea."), score=1.0)]

    claims = [TextNode(text=f"Offshore wind farm {i} harms fish.", id_=f"c{i}") for i in range(MIN_CLAIMS)]
    for node in claims[: MIN_HEAD - 1]:
        node.metadata["label"] = "T"
    plain = fit_index_verifier(Retriever(), claims, tmp_path / "plain")
    record = fit_index_verifier(Retriever(), claims, tmp_path / "calibrated", calibrate=True)
    assert plain is not None and record is not None
    assert record["kind"] == "archive" and record["choice"] == "shipped" and record["claims"] == MIN_HEAD - 1
    kept = index_verifier(tmp_path / "calibrated")
    assert kept is not None and kept.head is None
    assert (kept.threshold, kept.refuted_threshold) == (plain["supported"], plain["refuted"])
