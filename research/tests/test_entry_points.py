"""The research entry points, run in this process on the packaged demo corpus, offline:
``python -m research.eval`` (the papers' comparison, ``--explain``) and ``python -m research.paper``."""

from __future__ import annotations

import csv
import json

import pytest

from llama_index_carag.datasets import demo_corpus_path
from research import eval as research_eval
from research import paper


def run(capsys, entry, *args: str) -> dict:
    assert entry.main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def test_eval_limit_5(tmp_path, capsys):
    data = run(capsys, research_eval, "--limit", "5", "--out", str(tmp_path / "ev"), "--json")
    assert [r["method"] for r in data["results"]] == ["RAG", "CARAG", "CARAG-u", "CARAG-u (tuned)"]
    assert all(r["claims"] == 5 for r in data["results"])
    assert (tmp_path / "ev" / "results.csv").is_file() and (tmp_path / "ev" / "results.md").is_file()


def test_eval_limit_5_with_explanations(tmp_path, capsys, monkeypatch):
    """``--explain`` end to end with a deterministic stand-in LLM."""
    from llama_index_carag.models import resolve as models
    from tests.helpers import StubLLM

    monkeypatch.setattr(models, "resolve_llm", lambda *a, **k: StubLLM())
    data = run(capsys, research_eval, "--limit", "5", "--explain", "--out", str(tmp_path / "ev"), "--json")
    assert {r["method"] for r in data["verdicts"]} == {"RAG", "CARAG", "CARAG-u"}
    assert set(data["alignment"]) >= {"Oceans", "Energy", "Nutrition", "Overall"}
    rows = list(csv.DictReader((tmp_path / "ev" / "explanations.csv").open(encoding="utf-8")))
    assert len(rows) == 5 and all(r["CARAG_U"].strip() for r in rows)


def test_paper_table_entry_point_on_the_demo_corpus(tmp_path, capsys):
    """``python -m research.paper`` (formerly ``carag paper-table``): PCA distances per theme and method."""
    expl = tmp_path / "expl.csv"
    with expl.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Claim_id", "Theme", "RAG", "CARAG"])
        w.writerow(["1", "Oceans", "Sugar is added to drinks.", "Warm seas bleach corals."])
        w.writerow(["2", "Energy", "Coral reefs are bleached.", "Solar modules became much cheaper."])
        w.writerow(["3", "Nutrition", "Wind turbines stand offshore.", "Soft drinks add sugar for children."])
    args = ["--explanations", str(expl), "--data", str(demo_corpus_path()), "--embed-model", "minilm", "--no-tsne"]
    table = run(capsys, paper, *args, "--json", "--cache-dir", str(tmp_path / "cache"))
    assert set(table) == {"Oceans", "Energy", "Nutrition"}
    assert all(set(row) == {"RAG", "CARAG"} and set(row["RAG"]) == {"pca"} for row in table.values())
    assert run(capsys, paper, *args, "--json", "--cache-dir", str(tmp_path / "cache")) == table  # from the cache
    assert paper.main(args) == 0
    assert "| Oceans | RAG |" in capsys.readouterr().out


@pytest.mark.parametrize("entry", [research_eval, paper])
def test_help(entry, capsys):
    with pytest.raises(SystemExit) as exc:
        entry.main(["--help"])
    assert exc.value.code == 0 and "usage: python -m research." in capsys.readouterr().out
