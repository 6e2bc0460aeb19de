"""Research metrics on tiny hand-computed cases; the papers' alignment table on a synthetic case with a known answer."""

from __future__ import annotations

import math

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag.datasets import ClaimEvidenceCorpus
from research.alignment import centroid_distances, thematic_alignment
from research.explanations import ExplanationSet
from research.paper import paper_table
from research.retrieval_metrics import (
    RetrievalResult,
    annotated_recall_at_k,
    annotated_text_recall_at_k,
    reciprocal_rank,
    summarize_retrieval,
    theme_precision_at_k,
)
from research.runner import split_claims
from research.verdict_metrics import accuracy, confusion, macro_f1
from tests.helpers import TableEmbedding


def test_theme_precision():
    assert theme_precision_at_k(["A", "A", "B", "A"], "A", 3) == pytest.approx(2 / 3)
    assert theme_precision_at_k(["A", "B"], "A", 6) == 0.5  # fewer than k: scored on what came back
    assert theme_precision_at_k([], "A", 6) == 0.0
    assert theme_precision_at_k([None, "A"], "A", 2) == 0.5
    with pytest.raises(ValueError):
        theme_precision_at_k(["A"], "A", 0)


def test_annotated_recall():
    assert annotated_recall_at_k(["a", "x", "a", "b"], {"a", "b"}, 2) == 0.5
    assert annotated_recall_at_k(["a", "x", "a", "b"], {"a", "b"}, 4) == 1.0  # duplicates count once
    assert annotated_recall_at_k(["a", "b", "c"], {"a"}, 6) == 1.0  # k larger than the gold set
    assert annotated_recall_at_k(["a"], {"a", "b", "c", "d", "e", "f", "g", "h"}, 6) == pytest.approx(1 / 8)
    assert math.isnan(annotated_recall_at_k(["a"], set(), 6))


def test_text_recall_counts_identical_copies():
    gold = ["Coral  bleaching rose.", "Fish left."]
    assert annotated_text_recall_at_k(["coral bleaching rose.", "other"], gold, 6) == 0.5
    assert annotated_text_recall_at_k(["Fish left.", "Fish left.", "Coral bleaching rose."], gold, 2) == 0.5
    assert math.isnan(annotated_text_recall_at_k(["x"], [], 6))


def test_reciprocal_rank():
    assert reciprocal_rank(["x", "g1", "g2"], {"g1", "g2"}) == 0.5  # the first gold counts
    assert reciprocal_rank(["x", "y"], {"g"}) == 0.0
    assert reciprocal_rank(["x", "y", "g"], {"g"}, k=2) == 0.0
    assert math.isnan(reciprocal_rank(["x"], set()))


def test_summary_skips_undefined_recall_and_counts_empty_sois():
    rows = [
        RetrievalResult("c1", "A", ["a"], 1.0, 0.5, 1.0, 0.5, soi_size=0, fallback=True, seconds=0.001),
        RetrievalResult("c2", "A", ["b"], 0.5, math.nan, math.nan, math.nan, soi_size=4, fallback=False, seconds=0.003),
    ]
    s = summarize_retrieval("m", 6, rows)
    assert s.theme_precision == 0.75 and s.recall == 0.5 and s.mrr == 1.0
    assert s.soi_size == 2.0 and s.empty_soi_rate == 0.5 and s.median_ms == pytest.approx(2.0)


def test_verdict_metrics_hand_computed():
    gold, pred = ["T", "T", "F", "N"], ["T", "F", "F", "F"]
    assert accuracy(gold, pred) == 0.5
    # T: P=1 R=.5 F1=2/3; F: P=1/3 R=1 F1=.5; N: 0
    assert macro_f1(gold, pred) == pytest.approx((2 / 3 + 0.5 + 0.0) / 3)
    assert confusion(gold, pred)["T"] == {"T": 1, "F": 1, "N": 0}
    assert macro_f1(["T", "T"], ["T", "T"]) == 1.0  # absent labels are left out
    with pytest.raises(ValueError, match="T, F or N"):
        accuracy(["X"], ["T"])
    with pytest.raises(ValueError, match="labels"):
        accuracy(["T"], [])


def test_split_is_fixed_and_disjoint():
    claims = list(range(11))
    tune, report = split_claims(claims, seed=0)
    assert split_claims(claims, seed=0) == (tune, report)
    assert len(tune) == 5 and len(report) == 6 and sorted(tune + report) == claims
    assert split_claims(claims, seed=1) != (tune, report)


def _synthetic():
    """Theme A around (10, 0), theme B around (-10, 0) in a 2-D plane of a 3-D space.

    PCA to 2 components of points lying in a plane preserves distances, so each
    explanation's distance to its theme centroid is known exactly.
    """

    def lift(x, y):
        return np.array([x, y, 0.0]) @ np.array([[0.6, 0.8, 0.0], [-0.8, 0.6, 0.0], [0.0, 0.0, 1.0]])

    corpus = [lift(10 + dx, dy) for dx, dy in [(1, 0), (-1, 0), (0, 1), (0, -1)]]
    corpus += [lift(-10 + dx, dy) for dx, dy in [(2, 0), (-2, 0), (0, 2), (0, -2)]]
    themes = ["A"] * 4 + ["B"] * 4
    rag = np.array([lift(10, 3), lift(-10, 4)])  # distances 3 and 4
    carag = np.array([lift(11, 0), lift(-10, 0.5)])  # distances 1 and 0.5
    return np.array(corpus), themes, {"RAG": rag, "CARAG": carag}, ["A", "B"]


def test_centroid_distances_and_alignment_known_answer():
    corpus, themes, expl, expl_themes = _synthetic()
    centroid_a = corpus[:4, :2].mean(axis=0)
    d = centroid_distances(corpus[:, :2], themes, np.array([centroid_a + [0.0, 3.0]]), ["A"])
    assert d[0] == pytest.approx(3.0)
    table = thematic_alignment(corpus, themes, expl, expl_themes, projections=("pca",))
    out = table.to_dict()
    assert out["A"]["RAG"]["pca"] == pytest.approx(3.0) and out["B"]["RAG"]["pca"] == pytest.approx(4.0)
    assert out["A"]["CARAG"]["pca"] == pytest.approx(1.0) and out["B"]["CARAG"]["pca"] == pytest.approx(0.5)
    assert out["Overall"]["RAG"]["pca"] == pytest.approx(3.5)  # mean of the per-theme means
    assert table.diffs()["Overall"]["CARAG"]["pca"] == pytest.approx(0.75 - 3.5)
    assert "| A | RAG | 3.0000 |" in table.to_markdown()
    with pytest.raises(ValueError, match="no corpus points"):
        centroid_distances(corpus[:, :2], themes, np.array([[0.0, 0.0]]), ["C"])


def test_tsne_alignment_runs_with_a_seed():
    corpus, themes, expl, expl_themes = _synthetic()
    rng = np.random.default_rng(0)
    corpus = np.vstack([corpus + rng.normal(scale=0.1, size=corpus.shape) for _ in range(4)])
    table = thematic_alignment(corpus, themes * 4, expl, expl_themes, projections=("tsne",), seed=3)
    again = thematic_alignment(corpus, themes * 4, expl, expl_themes, projections=("tsne",), seed=3)
    assert table.to_dict() == again.to_dict() and table.seed == 3


def test_paper_table_on_a_synthetic_corpus(tmp_path):
    corpus_vecs, themes, expl, _ = _synthetic()
    nodes = [
        TextNode(id_=f"e{i}", text=f"passage {i}", metadata={"theme": t}, excluded_embed_metadata_keys=["theme"])
        for i, t in enumerate(themes)
    ]
    corpus = ClaimEvidenceCorpus(nodes, [])
    table_texts = {f"passage {i}": v for i, v in enumerate(corpus_vecs)}
    texts = {"RAG": ["rag a", "rag b"], "CARAG": ["carag a", "carag b"]}
    for method, vs in expl.items():
        for text, v in zip(texts[method], vs):
            table_texts[text] = v
    emb = TableEmbedding({k: list(v) for k, v in table_texts.items()})
    explanations = ExplanationSet(["1", "2"], ["claim a", "claim b"], ["A", "B"], texts)
    out = paper_table(explanations, corpus, emb, projections=("pca",)).to_dict(overall=False)
    assert set(out) == {"A", "B"}
    assert out["B"]["RAG"]["pca"] == pytest.approx(4.0) and out["A"]["CARAG"]["pca"] == pytest.approx(1.0)
    unknown = ExplanationSet(["1"], ["c"], ["Z"], {"RAG": ["rag a"]})
    with pytest.raises(ValueError, match="not themes of the corpus"):
        paper_table(unknown, corpus, emb)


def test_limit_takes_claims_round_robin_over_themes():
    from research.runner import first_per_theme

    claims = [TextNode(id_=f"{t}{i}", text="c", metadata={"theme": t}) for t in "AAB" for i in range(3)]
    picked = first_per_theme(claims, 4)
    assert [c.metadata["theme"] for c in picked] == ["A", "B", "A", "B"]
    assert first_per_theme(claims, None) == claims
