import numpy as np
import pytest

from llama_index_carag.core.soi import (
    ClusterMembers,
    SubsetOfInterest,
    build_supervised_soi,
    build_unsupervised_soi,
    most_similar,
)


def angle_vec(deg):
    r = np.deg2rad(deg)
    return np.array([np.cos(r), np.sin(r)], dtype=np.float32)


@pytest.fixture()
def cluster():
    # Claim c0 at 0 degrees.  cos(30°)=0.866, cos(40°)=0.766, cos(45°)=0.707, cos(60°)=0.5
    ids = ["c0", "e0a", "e0b", "c1", "e1a", "e1b", "c2", "e2a", "eX"]
    angles = [0, 30, 60, 40, 20, 45, 10, 35, 5]
    is_claim = [True, False, False, True, False, False, True, False, False]
    claim_of = ["c0", "c0", "c0", "c1", "c1", "c1", "c2", "c2", None]
    unit = np.vstack([angle_vec(a) for a in angles])
    return ClusterMembers(ids, [f"text {i}" for i in ids], unit, np.array(is_claim), claim_of)


def test_supervised_soi_exact_membership(cluster):
    soi = build_supervised_soi(angle_vec(0), cluster, 0.75, claim="claim zero", claim_id="c0", cluster=3, theme="T")
    assert [i.id for i in soi.annotated_evidences] == ["e0a"]  # e0b (60°) fails delta
    assert [i.id for i in soi.related_claims] == ["c2", "c1"]  # sorted by similarity, c0 itself excluded
    assert [i.id for i in soi.thematic_cluster_evidences] == ["e1a", "e2a", "e1b"][:2]  # e1b: 0.707 < 0.75
    assert soi.refined_cluster_evidences == []
    assert "eX" not in soi.item_ids  # evidence of no claim in the cluster is not CARAG context
    assert soi.claim_id == "c0" and soi.theme == "T" and soi.cluster == 3
    expected_t = np.mean([angle_vec(a) for a in (30, 10, 40, 20, 35)], axis=0)
    np.testing.assert_allclose(soi.thematic_embedding, expected_t, rtol=1e-6)
    assert soi.similarities["e0a"] == pytest.approx(np.cos(np.deg2rad(30)), rel=1e-6)


def test_supervised_soi_unknown_claim_has_no_annotated_evidence(cluster):
    soi = build_supervised_soi(angle_vec(0), cluster, 0.75, claim="new claim", claim_id=None)
    assert soi.annotated_evidences == []
    assert {i.id for i in soi.related_claims} == {"c0", "c1", "c2"}
    assert {i.id for i in soi.thematic_cluster_evidences} == {"e0a", "e1a", "e2a"}


def test_unsupervised_soi_is_cluster_evidence_above_delta(cluster):
    soi = build_unsupervised_soi(angle_vec(0), cluster, 0.75, claim="q")
    assert [i.id for i in soi.refined_cluster_evidences] == ["eX", "e1a", "e0a", "e2a"]
    assert soi.related_claims == [] and soi.annotated_evidences == []
    assert soi.cluster_size == 6  # evidence only


def test_threshold_is_strict(cluster):
    # e1b sits at exactly cos(45°); delta equal to it must exclude it
    d = float(np.dot(angle_vec(0), angle_vec(45)))
    soi = build_unsupervised_soi(angle_vec(0), cluster, d)
    assert "e1b" not in soi.item_ids


def test_empty_soi_has_no_thematic_embedding(cluster):
    soi = build_unsupervised_soi(angle_vec(180), cluster, 0.75)
    assert soi.is_empty and len(soi) == 0 and soi.thematic_embedding is None


def test_to_dict_from_dict_round_trip(cluster):
    soi = build_supervised_soi(angle_vec(0), cluster, 0.75, claim="claim zero", claim_id="c0", cluster=1, theme="T")
    d = soi.to_dict()
    assert set(d) >= {
        "claim_id",
        "claim",
        "annotated_evidences",
        "related_claims",
        "thematic_cluster_evidences",
        "refined_cluster_evidences",
        "similarities",
    }
    assert d["annotated_evidences"] == [{"id": "e0a", "text": "text e0a", "claim_id": "c0"}]
    back = SubsetOfInterest.from_dict(d)
    assert back == soi  # thematic_embedding is not compared
    import json

    json.dumps(d)  # JSON-safe


def test_from_dict_rejects_malformed():
    with pytest.raises(ValueError, match="'claim'"):
        SubsetOfInterest.from_dict({"claim_id": "x"})
    with pytest.raises(ValueError, match="needs 'id' and 'text'"):
        SubsetOfInterest.from_dict({"claim": "x", "related_claims": [{"id": "a"}]})


def test_min_size_keeps_the_most_similar_when_too_few_pass_delta(cluster):
    # at delta .999 nothing of the cluster passes (the nearest evidence, eX at 5°, has cosine 0.996)
    soi = build_unsupervised_soi(angle_vec(0), cluster, 0.999, min_size=3)
    assert [i.id for i in soi.refined_cluster_evidences] == ["eX", "e1a", "e0a"]  # the 3 nearest evidence items
    assert soi.min_size == 3 and soi.filled == 3 and soi.threshold == pytest.approx(np.cos(np.deg2rad(30)), rel=1e-6)
    assert soi.threshold < soi.delta  # widened below delta, and it says so
    expected_t = np.mean([angle_vec(a) for a in (5, 20, 30)], axis=0)
    np.testing.assert_allclose(soi.thematic_embedding, expected_t, rtol=1e-6)
    assert build_unsupervised_soi(angle_vec(0), cluster, 0.999).is_empty  # min_size 0: the papers' rule


@pytest.mark.parametrize("m", [1, 3, 7, 40, 200])
def test_most_similar_is_the_head_of_a_stable_sort(m):
    # values from a small set: many ties at the cut, which a stable sort breaks by row order
    rng = np.random.default_rng(m)
    sims = rng.integers(0, 6, 120).astype(np.float32) / 5
    rows = np.flatnonzero(rng.random(120) < 0.7)
    expected = np.sort(rows[np.argsort(-sims[rows], kind="stable")[:m]])
    np.testing.assert_array_equal(most_similar(sims, rows, m), expected)


def test_min_size_changes_nothing_when_enough_pass_delta(cluster):
    plain = build_unsupervised_soi(angle_vec(0), cluster, 0.75)
    widened = build_unsupervised_soi(angle_vec(0), cluster, 0.75, min_size=3)
    assert widened.item_ids == plain.item_ids == ["eX", "e1a", "e0a", "e2a"]
    assert widened.threshold > widened.delta and widened.filled == 0


def test_min_size_in_supervised_mode_draws_from_the_three_lists_only(cluster):
    soi = build_supervised_soi(angle_vec(0), cluster, 0.999, claim_id="c0", min_size=2)
    assert soi.item_ids == ["c2", "e1a"] and soi.filled == 2  # 10° and 20°: the two nearest (related, thematic)
    assert "eX" not in soi.item_ids  # the nearest item (5°) is linked to no claim: never CARAG context
    assert len(build_supervised_soi(angle_vec(0), cluster, 0.999, claim_id="c0", min_size=100)) == 7


def test_min_size_is_a_count(cluster):
    with pytest.raises(ValueError, match="min_size"):
        build_unsupervised_soi(angle_vec(0), cluster, 0.75, min_size=-1)
    with pytest.raises(TypeError, match="min_size"):
        build_unsupervised_soi(angle_vec(0), cluster, 0.75, min_size=1.5)


def test_min_size_round_trips_in_the_dict(cluster):
    soi = build_unsupervised_soi(angle_vec(0), cluster, 0.999, min_size=2)
    data = soi.to_dict()
    assert data["min_size"] == 2 and data["filled"] == 2 and data["threshold"] == pytest.approx(soi.threshold)
    back = SubsetOfInterest.from_dict(data)
    assert (back.min_size, back.filled) == (2, 2)
