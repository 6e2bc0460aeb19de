"""The new-claims benchmark protocol: task construction, metrics, baselines through real retrievers."""

from __future__ import annotations

import math

import pytest
from llama_index.core.schema import TextNode

from llama_index_carag.datasets import demo_corpus_path
from research.new_claims import (
    RetrievalTask,
    claim_half,
    evaluate_methods,
    factver_task,
    ndcg_at_k,
    prepare_task,
    stock_retrievers,
)


def test_ndcg_by_hand():
    assert ndcg_at_k(["a", "b", "c"], {"a"}) == 1.0
    assert ndcg_at_k(["x", "a"], {"a"}) == pytest.approx(1 / math.log2(3))
    assert ndcg_at_k(["x", "a", "a"], {"a", "b"}) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    assert math.isnan(ndcg_at_k(["a"], set()))
    assert ndcg_at_k(["x"] * 10 + ["a"], {"a"}) == 0.0  # beyond the cut-off


def test_claim_half_is_a_fixed_hash():
    assert claim_half("Claims_Climate_B2.0_1") == claim_half("Claims_Climate_B2.0_1")
    halves = [claim_half(f"claim-{i}") for i in range(400)]
    assert 150 < sum(halves) < 250


def test_factver_layout_task_keeps_query_claims_out_of_the_corpus():
    report = factver_task(demo_corpus_path())
    tune = factver_task(demo_corpus_path(), queries="tune")
    assert report.queries and tune.queries
    assert {q.node_id for q in report.queries}.isdisjoint({c.node_id for c in report.corpus_claims})
    assert {q.node_id for q in report.queries} <= {c.node_id for c in tune.corpus_claims}
    texts = [e.get_content() for e in report.evidence]
    assert len(texts) == len({" ".join(t.split()).casefold() for t in texts})  # de-duplicated by text
    ids = {e.node_id for e in report.evidence}
    assert all(g <= ids for g in report.gold.values())
    with pytest.raises(ValueError, match="'report' or 'tune'"):
        factver_task(demo_corpus_path(), queries="all")


def test_overlap_and_missing_gold_are_refused():
    node = TextNode(id_="c1", text="claim")
    with pytest.raises(ValueError, match="also corpus claims"):
        RetrievalTask("t", [TextNode(id_="e", text="e")], [node], [node], {"c1": {"e"}})
    with pytest.raises(ValueError, match="no gold"):
        RetrievalTask("t", [TextNode(id_="e", text="e")], [], [node], {"c1": set()})


def test_stock_baselines_run_and_score(minilm):
    prepared = prepare_task(factver_task(demo_corpus_path()), minilm)
    rows = evaluate_methods(prepared, stock_retrievers(prepared))
    assert [r["method"] for r in rows] == [
        "dense (index.as_retriever)",
        "BM25 (BM25Retriever)",
        "hybrid RRF (QueryFusionRetriever)",
    ]
    for row in rows:
        assert row["queries"] == len(prepared.task.queries)
        for key in ("nDCG@10", "recall@6", "MRR@10", "theme_precision@6"):
            assert 0.0 <= row[key] <= 1.0
        assert row["nDCG@10"] > 0.3  # the demo claims' own evidence is easy to find
        assert row["median_ms"] > 0


def test_retrieval_bench_on_the_demo_corpus(tmp_path, capsys):
    import json

    from research.retrieval_bench import main

    assert main(["--protocol", "--limit", "4", "--out", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    methods = [r["method"] for r in out["results"]]
    assert methods[:3] == ["dense (index.as_retriever)", "BM25 (BM25Retriever)", "hybrid RRF (QueryFusionRetriever)"]
    assert any("preset default" in m for m in methods) and any("preset paper" in m for m in methods)
    assert all(r["queries"] == 4 for r in out["results"])
    md = (tmp_path / "protocol_factver_report_half_first_4_queries_minilm.md").read_text(encoding="utf-8")
    assert "never the queries" in md and "| dense (index.as_retriever) |" in md
    assert (tmp_path / "protocol_factver_report_half_first_4_queries_minilm.csv").is_file()
    with pytest.raises(SystemExit) as exc:
        main(["--protocol", "--split", "all", "--out", str(tmp_path)])  # new claims only
    assert exc.value.code == 2
