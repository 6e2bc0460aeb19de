"""The FactVer verdict benchmark's helpers (:mod:`research.verdict_bench`): the subset, the metrics, the arg-max
re-read."""

from __future__ import annotations

import json

from llama_index.core.schema import TextNode

from research.verdict_bench import _argmax_row, balanced_subset, summarize_rows


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
