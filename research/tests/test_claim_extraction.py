"""The claim-extraction benchmark (:mod:`research.claim_extraction`): its pools, its scores by hand, its seeded texts."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from llama_index_carag.extraction import Assessment
from research.claim_extraction import (
    CLAIM_KIND,
    BenchmarkText,
    Piece,
    build_texts,
    format_scores,
    score_texts,
    split_claims,
)
from research.claim_extraction_pools import KINDS, REPORT_POOL, TUNING_POOL
from research.new_claims import claim_half


def test_pools_are_disjoint_and_large_enough():
    for pool in (TUNING_POOL, REPORT_POOL):
        assert tuple(pool) == KINDS
        assert sum(len(v) for v in pool.values()) >= 60
        assert all(len(set(v)) == len(v) for v in pool.values())
    tuning = {s for v in TUNING_POOL.values() for s in v}
    report = {s for v in REPORT_POOL.values() for s in v}
    assert tuning.isdisjoint(report)


def test_scores_by_hand():
    text = "Hi all. The EU cut emissions. It rose. What now?"
    pieces = (Piece(0, 7, "greeting"), Piece(8, 38, CLAIM_KIND, "c1"), Piece(39, 48, "question"))
    assert text[8:38] == "The EU cut emissions. It rose."
    item = BenchmarkText(text, pieces)

    class Fixed:
        threshold = 1.0

        def __init__(self, scores: list[float]) -> None:
            self.scores = scores

        def score(self, sentences: Sequence[str]) -> list[Assessment]:
            return [Assessment(s) for s in self.scores]

    full = score_texts([item], scorer=Fixed([0, 1, 1, 0]))
    assert (full.precision, full.recall, full.recall_any, full.span_accuracy) == (1.0, 1.0, 1.0, 1.0)
    assert full.multi_sentence_claims == 1 and full.span_errors == 0
    half = score_texts([item], scorer=Fixed([1, 1, 0, 0]))  # one sentence of the claim and the greeting
    assert (half.precision, half.recall, half.recall_any) == (0.5, 0.0, 1.0)
    assert half.false_positive_rate["greeting"] == 1.0 and half.false_positive_rate["question"] == 0.0
    assert math.isnan(half.false_positive_rate["opinion"])  # no opinion in this text
    assert "| precision | 0.500 |" in format_scores(half, "t")


@pytest.fixture(scope="module")
def report_texts(factver_path):
    return build_texts(factver_path, "report", seed=0)


def test_benchmark_is_seeded_and_keeps_report_claims_out_of_tuning(factver_path, report_texts):
    assert build_texts(factver_path, "report", seed=0) == report_texts
    assert build_texts(factver_path, "report", seed=1) != report_texts
    tuning = split_claims(factver_path, "tune")
    tuning_texts = {text for _, text in tuning}
    report_sentences = {s for v in REPORT_POOL.values() for s in v}
    placed: list[str] = []
    for item in report_texts:
        assert 3 <= len(item.pieces) <= 8
        for piece in item.pieces:
            sentence = item.text[piece.start : piece.end]
            if piece.kind == CLAIM_KIND:
                assert piece.claim_id is not None and claim_half(piece.claim_id) == 1
                assert sentence not in tuning_texts
                placed.append(piece.claim_id)
            else:
                assert sentence in report_sentences
    assert sorted(placed) == sorted(cid for cid, _ in split_claims(factver_path, "report"))
    assert all(claim_half(cid) == 0 for cid, _ in tuning)
    assert len(placed) == len(set(placed)) > 200  # every report claim placed exactly once
