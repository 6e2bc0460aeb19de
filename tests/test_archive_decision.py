"""The archive decision: its features, the estimator's declared rule and state, and the offline replay."""

from __future__ import annotations

import json

import numpy as np
import pytest
from llama_index.core.schema import NodeWithScore, TextNode
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import InvalidParameterError

from llama_index_carag.evaluation import archive_replay
from llama_index_carag.verdicts.labels.archive_decision import PRIOR, ArchiveDecision, balanced_accuracy
from llama_index_carag.verdicts.labels.archive_features import (
    ClaimSignals,
    archive_features,
    available_groups,
    feature_names,
    negation_mismatch,
    number_mismatch,
)
from llama_index_carag.verdicts.types import VerdictLabel

S, R, N = VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO


def _row(joint, gold="T", split="report", passages=None, cosines=None, ids=("p1",), claim="c", evidence="annotated"):
    return {
        "kind": "claim",
        "model": "m",
        "domain": "d",
        "evidence": evidence,
        "claim_id": f"{claim}-{split}",
        "claim": claim,
        "gold": gold,
        "split": split,
        "passage_ids": list(ids),
        "joint": dict(zip(("SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"), joint)),
        "passages": passages,
        "cosines": cosines,
    }


# ------------------------------------------------------------------ features
def test_joint_features_are_normalised_log_probabilities() -> None:
    s = ClaimSignals.from_cache_row(_row((-1.0, -2.0, -3.0)))
    x = archive_features([s], ["joint"])
    assert x.shape == (1, 3)
    assert np.exp(x[0]).sum() == pytest.approx(1.0)
    assert x[0, 0] - x[0, 1] == pytest.approx(1.0)  # differences kept


def test_passage_cosine_and_cue_features_by_hand() -> None:
    passages = [
        {"SUPPORTED": 0.0, "REFUTED": -50.0, "NOT_ENOUGH_INFO": -50.0},
        {"SUPPORTED": -50.0, "REFUTED": -50.0, "NOT_ENOUGH_INFO": 0.0},
    ]
    row = _row((0, 0, 0), passages=passages, cosines=[0.2, 0.6], claim="Sales rose 5% in 2020")
    texts = ["Sales did not rise in 2019.", "Sales rose 5% in 2020."]
    s = ClaimSignals.from_cache_row(row, texts)
    x = archive_features([s], ["joint", "passages", "cosines", "cues"])
    names = feature_names(["joint", "passages", "cosines", "cues"])
    got = dict(zip(names, x[0]))
    assert got["passage_mean_S"] == pytest.approx(0.5) and got["passage_max_S"] == pytest.approx(1.0)
    assert got["passage_mean_N"] == pytest.approx(0.5) and got["passage_max_R"] == pytest.approx(0.0, abs=1e-9)
    assert (got["cosine_max"], got["cosine_mean"]) == (pytest.approx(0.6), pytest.approx(0.4))
    assert got["number_mismatch_share"] == pytest.approx(0.5)  # 2019 has none of 5, 2020
    assert got["negation_mismatch_share"] == pytest.approx(0.5)


def test_cues() -> None:
    assert number_mismatch("It cost 1,200 dollars", "It cost 900 dollars")
    assert not number_mismatch("It cost 1,200 dollars", "It cost 1200 dollars")
    assert not number_mismatch("It cost a lot", "It cost 900 dollars")  # the claim states no number
    assert not number_mismatch("It cost 5", "It was expensive")  # the passage states none
    assert negation_mismatch("Vaccines do not cause autism", "Vaccines cause autism")
    assert not negation_mismatch("It isn't true", "They never did")


def test_groups_say_what_a_claim_lacks() -> None:
    with_all = ClaimSignals.from_cache_row(
        _row((0, 0, 0), passages=[{"SUPPORTED": 0, "REFUTED": 0, "NOT_ENOUGH_INFO": 0}], cosines=[0.1]), ["t"]
    )
    joint_only = ClaimSignals.from_cache_row(_row((0, 0, 0)))
    assert available_groups([with_all]) == ("joint", "passages", "cosines", "cues")
    assert available_groups([with_all, joint_only]) == ("joint",)
    with pytest.raises(ValueError, match="cosines"):
        archive_features([joint_only], ["joint", "cosines"])
    with pytest.raises(ValueError, match="start with 'joint'"):
        archive_features([with_all], ["cosines"])
    with pytest.raises(ValueError, match="Unknown"):
        feature_names(["joint", "nope"])


def test_live_signals_read_the_provenance() -> None:
    def node(i: int, info: dict | None) -> NodeWithScore:
        meta = {"carag": info} if info is not None else {}
        return NodeWithScore(node=TextNode(id_=f"n{i}", text=f"passage {i}", metadata=meta), score=1.0)

    infos = [
        {"claim_similarity": 0.5, "lexical_score": 3.0, "in_soi": True},
        {"claim_similarity": 0.3, "lexical_score": 1.0, "in_soi": False},
    ]
    s = ClaimSignals.from_nodes("claim", [node(0, infos[0]), node(1, infos[1])], {S: -1.0, R: -2.0, N: -3.0})
    assert s.texts == ["passage 0", "passage 1"] and s.cosines == [0.5, 0.3]
    x = archive_features([s], ["joint", "cosines", "bm25", "soi"])
    assert x[0, 3:].tolist() == pytest.approx([0.5, 0.4, 3.0, 0.5])
    annotated = ClaimSignals.from_nodes("claim", [node(0, None)], {S: 0.0, R: 0.0, N: 0.0})
    assert annotated.cosines is None and annotated.bm25 is None and annotated.in_soi is None


# ------------------------------------------------------------------ the estimator
def _data(n_per_label: int, seed: int = 0, informative: bool = True) -> tuple[np.ndarray, list[str]]:
    """Joint columns lean to REFUTED whatever the label; a 4th feature tells the label when ``informative``."""
    rng = np.random.default_rng(seed)
    labels = [c for c in ("T", "F", "N") for _ in range(n_per_label)]
    logits = rng.normal(0, 0.3, (len(labels), 3)) + np.array([0.0, 1.5, 0.0])
    joint = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    signal = np.array([{"T": 0.0, "F": 3.0, "N": 6.0}[c] for c in labels]) if informative else np.zeros(len(labels))
    x = np.column_stack([joint, signal + rng.normal(0, 0.5, len(labels))])
    return x, labels


def test_fits_a_candidate_when_it_beats_the_prior_out_of_fold() -> None:
    x, y = _data(12)
    d = ArchiveDecision().fit(x, y)
    assert d.choice_ in {"C=0.01", "C=0.1", "C=1"} and d.fallback_ is None
    assert set(d.cv_scores_) == {"C=0.01", "C=0.1", "C=1"} and d.n_splits_ == 5
    assert d.cv_gain_ == pytest.approx(max(d.cv_scores_.values()) - d.prior_score_) and d.cv_gain_ > 0
    xt, yt = _data(10, seed=1)
    expected = [VerdictLabel.from_fever(c).value for c in yt]
    assert balanced_accuracy(expected, d.predict(xt)) > 0.9
    proba = d.predict_proba(xt)
    assert proba.shape == (30, 3) and np.allclose(proba.sum(axis=1), 1.0)
    assert "archive decision fitted on 36 labelled claims" in d.reason()


def test_falls_back_to_the_prior_without_gain() -> None:
    x, y = _data(12, informative=False)
    x[:, 3] = 0.0
    d = ArchiveDecision().fit(x, y)
    assert d.choice_ == PRIOR and d.fallback_ == "no_gain" and d.cv_gain_ <= 0
    prior = np.exp(x[:, :3]).mean(axis=0)
    expected = np.array(["SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO"])[(x[:, :3] - np.log(prior)).argmax(axis=1)]
    assert d.predict(x).tolist() == expected.tolist()
    assert "did not beat it out of fold" in d.reason()


def test_too_few_labelled_claims_give_the_prior_without_cv() -> None:
    x, y = _data(5)  # 15 claims, 5 per label: under 24 and under 6 per label
    d = ArchiveDecision().fit(x, y)
    assert d.choice_ == PRIOR and d.fallback_ == "too_few" and d.cv_scores_ == {} and d.cv_gain_ is None
    assert "15 labelled archive claims" in d.reason()
    x2, y2 = _data(12)
    y2 = ["T" if c == "N" else c for c in y2]  # no NOT_ENOUGH_INFO at all
    assert ArchiveDecision().fit(x2, y2).fallback_ == "too_few"


def test_a_given_prior_is_divided_out() -> None:
    x, y = _data(3)
    d = ArchiveDecision(prior={"T": 0.2, "F": 0.6, "N": 0.2}).fit(x, y)
    assert d.prior_.tolist() == pytest.approx([0.2, 0.6, 0.2])
    with pytest.raises(ValueError, match="positive probability"):
        ArchiveDecision(prior={"T": 1.0}).fit(x, y)


def test_state_round_trips_through_json() -> None:
    for informative in (True, False):
        x, y = _data(12, informative=informative)
        d = ArchiveDecision(Cs=(0.1, 1.0)).fit(x, y, feature_names=["a", "b", "c", "d"])
        text = json.dumps(d.get_state(), allow_nan=False)
        back = ArchiveDecision.from_state(json.loads(text))
        assert back.get_params() == d.get_params() | {"Cs": (0.1, 1.0)}
        assert back.predict_proba(x) == pytest.approx(d.predict_proba(x))
        assert back.reason() == d.reason() and back.feature_names_ == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match="format"):
        ArchiveDecision.from_state({"format": "other"})


def test_estimator_checks() -> None:
    with pytest.raises(NotFittedError):
        ArchiveDecision().predict(np.zeros((1, 3)))
    with pytest.raises(InvalidParameterError):
        ArchiveDecision(min_per_label=1).fit(*_data(12))
    with pytest.raises(ValueError, match="positive numbers"):
        ArchiveDecision(Cs=(0.0,)).fit(*_data(12))
    x, y = _data(12)
    with pytest.raises(ValueError, match="rows"):
        ArchiveDecision().fit(x, y[:-1])
    d = ArchiveDecision().fit(x, y)
    with pytest.raises(ValueError, match="features"):
        d.predict(x[:, :3])
    with pytest.raises(ValueError, match="Unknown verdict label"):
        ArchiveDecision().fit(x, ["X"] * len(y))


# ------------------------------------------------------------------ the replay
def test_replay_on_a_small_cache(tmp_path) -> None:
    rng = np.random.default_rng(0)
    rows = []
    for split, n in (("archive", 10), ("report", 4)):
        for i in range(n):
            for gold, lean in (("T", (1.0, 0, 0)), ("F", (0, 1.0, 0)), ("N", (0, 0, 1.0))):
                joint = tuple(np.array(lean) * 2 + rng.normal(0, 0.3, 3) - 3)
                rows.append(_row(joint, gold, split, cosines=[0.5], claim=f"{gold}{i}"))
    path = tmp_path / "cache.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [{"kind": "prior", "model": "m"}, *rows]) + "\n")
    loaded = archive_replay.replay_rows([path])
    assert len(loaded) == len(rows)
    table = archive_replay.replay(loaded, {})
    by = {r["decision"]: r for r in table}
    assert set(by) == {"argmax", "prior", "archive"}
    assert by["archive"]["features"] == "joint+cosines"  # no passages, no texts in this cache
    assert by["argmax"]["accuracy"] == pytest.approx(1.0) and by["argmax"]["claims"] == 12
    assert "| decision |" in archive_replay.markdown(table)
    curve = archive_replay.learning_curve(loaded, {}, sizes=(30,), repeats=1)
    assert [c["rule"] for c in curve] == ["declared", "no minimum"] and curve[0]["fits"] == 1
