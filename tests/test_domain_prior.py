"""DomainLabelPrior: an archive's label lean measured without labels, divided out of verdicts."""

from __future__ import annotations

import json
import math

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_carag.verdicts import VerdictLabel
from llama_index_carag.verdicts.decision import ArgMaxDecision, ScoredEvidence, VerdictSettings, resolve_decision
from llama_index_carag.verdicts.labels.domain_prior import PRIOR_FILE, DomainLabelPrior, mean_probabilities
from llama_index_carag.verdicts.labels.label_scores import LabelScores
from llama_index_carag.verdicts.labels.stance import PassageStance, label_probabilities

S, R, N = VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO


def _lp(s: float, r: float, n: float) -> dict[VerdictLabel, float]:
    z = math.log(math.exp(s) + math.exp(r) + math.exp(n))
    return {S: s - z, R: r - z, N: n - z}


class LeaningSynth:
    """A fake score-mode synthesizer whose every claim leans REFUTED by 2 nats; "true" claims add 1 nat
    to SUPPORTED. Counts the claims it scored and never sees a label."""

    class _LLM:
        metadata = type("M", (), {"model_name": "leaning-llm"})()

    def __init__(self) -> None:
        self._llm, self.scored = self._LLM(), []

    def score_labels(self, claim, nodes):
        self.scored.append(claim)
        return LabelScores(_lp(1.0 * ("true" in claim), 2.0, 0.0))

    def score_stances(self, claim, nodes):
        return [PassageStance(i, n.node.node_id, R, 0.5, {}, _lp(0.0, 1.0, 0.0)) for i, n in enumerate(nodes, start=1)]


def _refuting_prior(model: str) -> dict:
    """A saved prior (JSON form) of ``model`` that leans to REFUTED, without stances."""
    return {
        "format": "carag-domain-label-prior/1",
        "params": {"n_claims": 3, "random_state": 0, "stances": False},
        "joint": {"SUPPORTED": 0.1, "REFUTED": 0.8, "NOT_ENOUGH_INFO": 0.1},
        "stance": None,
        "claims": 3,
        "passages": 0,
        "model": model,
    }


def _claims(n: int) -> list[tuple[str, list[NodeWithScore]]]:
    nodes = [NodeWithScore(node=TextNode(id_="e", text="passage"), score=None)]
    return [(f"claim {i} {'true' if i % 2 else 'false'}", nodes) for i in range(n)] + [("no evidence", [])]


def test_fit_measures_the_lean_on_a_sample_without_labels(monkeypatch):
    monkeypatch.setattr("llama_index_carag.models.resolve.llm_name", lambda llm: "leaning-llm")
    synth = LeaningSynth()
    prior = DomainLabelPrior(n_claims=4, random_state=0).fit(synth, _claims(10))
    assert len(synth.scored) == 4 and "no evidence" not in synth.scored  # a sample; claims without evidence skipped
    assert prior.n_claims_ == 4 and prior.n_passages_ == 4 and prior.model_ == "leaning-llm"
    assert prior.joint_[R] > 0.6 and sum(prior.joint_.values()) == pytest.approx(1.0)
    assert prior.stance_ == pytest.approx(label_probabilities(_lp(0.0, 1.0, 0.0)))
    again = DomainLabelPrior(n_claims=4, random_state=0).fit(LeaningSynth(), _claims(10))
    assert again.joint_ == prior.joint_  # seeded sample
    corrected = prior.correct_joint(_lp(1.0, 2.0, 0.0))  # a true claim: its lean divided out
    assert max(corrected, key=corrected.get) is S
    with pytest.raises(ValueError, match="n_claims"):
        DomainLabelPrior(n_claims=0).fit(synth, _claims(3))
    with pytest.raises(ValueError, match="at least one claim"):
        DomainLabelPrior().fit(synth, [("c", [])])
    with pytest.raises(ValueError, match="not fitted"):
        DomainLabelPrior().correct_joint(_lp(0, 0, 0))


def test_the_arg_max_divides_the_lean_out():
    prior = {S: 0.1, R: 0.8, N: 0.1}
    evidence = ScoredEvidence("c", ["x"], ["E1"], joint=_lp(1.0, 2.0, 0.0))
    assert ArgMaxDecision().decide(evidence).label is R
    decided = ArgMaxDecision(prior=prior).decide(evidence)
    assert decided.label is S and "lean" in decided.reason
    fitted = DomainLabelPrior.from_state(_refuting_prior("m"))
    assert resolve_decision(VerdictSettings(decision="llm"), None, None, fitted).decide(evidence).label is S
    off = resolve_decision(VerdictSettings(decision="llm", calibration="none"), None, None, fitted)
    assert off.decide(evidence).label is R


def test_save_and_load_round_trip_and_bad_files(tmp_path, monkeypatch):
    monkeypatch.setattr("llama_index_carag.models.resolve.llm_name", lambda llm: "leaning-llm")
    prior = DomainLabelPrior(n_claims=3).fit(LeaningSynth(), _claims(5))
    path = prior.persist(tmp_path)
    assert path == tmp_path / PRIOR_FILE
    loaded = DomainLabelPrior.from_persist_dir(tmp_path)
    assert loaded.joint_ == pytest.approx(prior.joint_) and loaded.stance_ == pytest.approx(prior.stance_)
    assert loaded.model_ == "leaning-llm" and loaded.n_claims == 3
    bad = json.loads(path.read_text())
    bad["joint"]["REFUTED"] = 0.0
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / PRIOR_FILE).write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="positive"):
        DomainLabelPrior.from_persist_dir(tmp_path / "bad")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / PRIOR_FILE).write_text("{")
    with pytest.raises(ValueError, match="Cannot read"):
        DomainLabelPrior.from_persist_dir(tmp_path / "junk")
    with pytest.raises(ValueError, match="Cannot read"):
        DomainLabelPrior.from_persist_dir(tmp_path / "none")
    with pytest.raises(ValueError, match="format"):
        DomainLabelPrior.from_state({"format": "other"})
    assert mean_probabilities([_lp(0, 0, 0)]) == pytest.approx({S: 1 / 3, R: 1 / 3, N: 1 / 3})
    with pytest.raises(ValueError):
        mean_probabilities([])


def test_a_prior_of_another_llm_is_not_used(caplog, tmp_path):
    from llama_index.core.llms import MockLLM

    from llama_index_carag.serve.llm_worker import serve_synthesizers
    from llama_index_carag.verdicts.labels.domain_prior import prior_for

    data = _refuting_prior("some-other-llm")
    with caplog.at_level("WARNING"):
        assert prior_for(DomainLabelPrior.from_state(data), MockLLM()) is None
    assert "not used" in caplog.text
    DomainLabelPrior.from_state(data).persist(tmp_path)
    synth, stream = serve_synthesizers(MockLLM(), None, str(tmp_path), "llm")  # the workers' path: the index folder
    assert synth._domain_prior is None and stream._domain_prior is None
    assert prior_for(None, MockLLM()) is None


def test_calibration_scores_each_claim_with_its_linked_evidence():
    from llama_index_carag.cli.calibrate_verdicts import _linked_evidence
    from llama_index_carag.datasets import CLAIM_KEY, demo_corpus_path, load_factver

    corpus = load_factver(demo_corpus_path())
    linked = _linked_evidence(corpus, 2)
    assert {c.node_id for c in corpus.claim_nodes} <= set(linked)
    for claim_id, nodes in linked.items():
        assert 1 <= len(nodes) <= 2 and all(n.node.metadata[CLAIM_KEY] == claim_id for n in nodes)


def test_the_lean_reads_a_passage_shared_by_two_claims_for_both(tmp_path):
    import csv

    from llama_index_carag.cli.calibrate_verdicts import _linked_evidence
    from llama_index_carag.datasets import load_claim_evidence_csv

    path = tmp_path / "archive.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(
            [
                ("claim_id", "claim", "evidence_id", "evidence"),
                ("a", "Claim A", "e1", "shared"),
                ("b", "Claim B", "e1", "shared"),
            ]
        )
    corpus = load_claim_evidence_csv(path, claim_id_col="claim_id", evidence_id_col="evidence_id")
    linked = _linked_evidence(corpus, 6)
    assert {cid: [n.node.node_id for n in nodes] for cid, nodes in linked.items()} == {"a": ["e1"], "b": ["e1"]}
