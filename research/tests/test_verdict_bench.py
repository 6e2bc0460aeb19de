"""The FactVer verdict benchmark's helpers (:mod:`research.verdict_bench`): the subset, the metrics, the arg-max
re-read, and the label-bias offsets it tunes (:mod:`research.label_bias`)."""

from __future__ import annotations

import json

import pytest
from llama_index.core.schema import TextNode

from llama_index_carag.verdicts import VerdictLabel
from research.label_bias import LabelBiasCalibrator, measured_bias
from research.verdict_bench import _argmax_row, balanced_subset, summarize_rows

S, R, N = VerdictLabel.SUPPORTED, VerdictLabel.REFUTED, VerdictLabel.NOT_ENOUGH_INFO


def test_benchmark_metrics_and_subset():
    claims = [
        TextNode(text=str(i), id_=f"c{i}", metadata={"label": "TFN"[i % 3], "theme": "ab"[i % 2]}) for i in range(30)
    ]
    subset = balanced_subset(claims, 4)
    assert [c.metadata["label"] for c in subset] == ["T"] * 4 + ["F"] * 4 + ["N"] * 4
    assert {c.metadata["theme"] for c in subset[:4]} == {"a", "b"}
    rows = [
        {
            "gold": "T",
            "pred": "T",
            "parsed": "True",
            "seconds": "2",
            "n_passages": "2",
            "cited": "[1]",
            "invalid_citations": "[]",
            "repaired": "False",
        },
        {
            "gold": "N",
            "pred": "T",
            "parsed": "True",
            "seconds": "4",
            "n_passages": "2",
            "cited": "[]",
            "invalid_citations": "[3]",
            "repaired": "True",
        },
    ]
    m = summarize_rows(rows, [0.5, 0.7])
    assert m["accuracy"] == 0.5 and m["recall_T"] == 1.0 and m["recall_N"] == 0.0
    assert m["s_per_verdict"] == 3.0 and m["citation_validity_raw"] == 0.5 and m["citation_validity"] == 1.0
    assert m["cites_passage"] == 0.5 and m["cos_reason_mpnet"] == 0.6 and m["parse_rate"] == 1.0


def test_summary_rows_reread_with_the_plain_arg_max():
    row = {"pred": "N", "scores": json.dumps({"SUPPORTED": -0.5, "REFUTED": -2.0, "NOT_ENOUGH_INFO": -1.0})}
    assert _argmax_row(row)["pred"] == "T" and row["pred"] == "N"
    assert _argmax_row({"pred": "F", "scores": ""}) == {"pred": "F", "scores": ""}


def test_calibrator_learns_a_not_enough_info_offset():
    # NEI is never the top score, but NEI claims have it close behind: an offset recovers them.
    rows = [({S: -0.1, R: -3.0, N: -4.0}, "T")] * 4 + [({S: -3.0, R: -0.1, N: -4.0}, "F")] * 4
    rows += [({S: -0.5, R: -3.0, N: -1.5}, "N")] * 4
    cal = LabelBiasCalibrator().fit([r for r, _ in rows], [g for _, g in rows])
    assert 1.0 < cal.bias_[N] < 3.0
    assert cal.predict([r for r, _ in rows]) == [VerdictLabel.from_fever(g) for _, g in rows]
    assert cal.score_ == 1.0
    with pytest.raises(RuntimeError, match="not fitted"):
        LabelBiasCalibrator().predict([rows[0][0]])
    with pytest.raises(ValueError):
        LabelBiasCalibrator().fit([rows[0][0]], ["T", "F"])
    assert measured_bias(None) is None and measured_bias("no-such-model") is None
    assert set(measured_bias("Qwen2.5-Coder-1.5B-Instruct")) == {S, R, N}


def test_offsets_are_kept_only_when_they_beat_none_out_of_fold(rng):
    # A real NEI shift generalises: kept.  Labels unrelated to the scores: the grid fits noise, dropped.
    rows = [({S: -0.1, R: -3.0, N: -4.0}, "T")] * 6 + [({S: -3.0, R: -0.1, N: -4.0}, "F")] * 6
    rows += [({S: -0.5, R: -3.0, N: -1.5}, "N")] * 6
    groups = [f"c{i}" for i in range(len(rows))]
    kept = LabelBiasCalibrator().fit([r for r, _ in rows], [g for _, g in rows], groups=groups)
    assert kept.bias_[N] > 1.0 and kept.cv_scores_["offsets"] > kept.cv_scores_["none"]
    noise = [{S: float(a), R: float(b), N: float(c)} for a, b, c in rng.normal(size=(30, 3))]
    gold = list(rng.choice(["T", "F", "N"], size=30))
    dropped = LabelBiasCalibrator().fit(noise, gold, groups=[f"c{i // 2}" for i in range(30)])
    if dropped.cv_scores_["offsets"] <= dropped.cv_scores_["none"]:
        assert set(dropped.bias_.values()) == {0.0}
    else:
        assert dropped.bias_ == LabelBiasCalibrator().fit(noise, gold).bias_
    with pytest.raises(ValueError, match="at least 2 groups"):
        LabelBiasCalibrator().fit(noise, gold, groups=["one"] * 30)
