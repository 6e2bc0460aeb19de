"""The BEIR-format loader, on SciFact from ../shared and on small broken folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from research.beir import load_beir

SHARED = Path(os.environ.get("CARAG_SHARED", Path(__file__).resolve().parents[2].parent / "shared"))
SCIFACT = SHARED / "data" / "scifact"


@pytest.fixture(scope="module")
def scifact():
    if not (SCIFACT / "corpus.jsonl").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"SciFact not found at {SCIFACT}")
        pytest.skip(f"SciFact not found at {SCIFACT}")
    return load_beir(SCIFACT)


def test_scifact_counts(scifact):
    assert len(scifact.documents) == 5183
    assert len(scifact.queries) == 1109
    assert len(scifact.split("test")) == 300
    assert len(scifact.split("train")) == 809
    assert sum(len(d) for d in scifact.split("test").values()) == 339
    doc = scifact.documents[0]
    assert doc.text.startswith(doc.text.split(" ")[0]) and " " in doc.text  # title + " " + text
    with pytest.raises(KeyError, match="has no qrels/dev.tsv"):
        scifact.split("dev")


def test_broken_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match="corpus.jsonl is missing"):
        load_beir(tmp_path)
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "title": "T", "text": "body"}\nnot json\n', encoding="utf-8")
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "claim"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="corpus.jsonl:2"):
        load_beir(tmp_path)
    (tmp_path / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "T", "text": "body"}\n{"_id": "d2"}\n', encoding="utf-8"
    )
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq1\td2\t0\r\n", encoding="utf-8"
    )
    data = load_beir(tmp_path)
    assert [d.node_id for d in data.documents] == ["d1"]  # the empty one is skipped
    assert data.split("test") == {"q1": {"d1": 1}}
    (tmp_path / "qrels" / "test.tsv").write_text("q1\td1\tnot-a-number\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not a number"):
        load_beir(tmp_path)
