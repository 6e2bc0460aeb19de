"""Self-calibration of the stage weights from the corpus claims' linked evidence (retrieval.calibration)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.retrieval import calibration as calibration_module
from llama_index_carag.retrieval.calibration import (
    LINKS_KEY,
    Calibration,
    LeaveOneOutTerms,
    StageCalibrator,
    claim_links,
)
from llama_index_carag.settings import DEFAULT
from tests.helpers import TableEmbedding, faiss_index, unit

N_CLAIMS = 60
DIM = 32
BASE = DEFAULT.replace(similarity_top_k=10, rerank_candidates=20)


def _word(rng: np.random.Generator) -> str:
    return "".join(rng.choice(list("bcdfghjklmnpqrstvwxz"), size=7))


def _node(node_id: str, text: str, vector: np.ndarray, metadata: dict | None = None) -> TextNode:
    meta = dict(metadata or {})
    return TextNode(
        id_=node_id,
        text=text,
        metadata=meta,
        embedding=vector.tolist(),
        excluded_embed_metadata_keys=list(meta),
        excluded_llm_metadata_keys=list(meta),
    )


def lexical_trap_corpus(seed: int = 0, n_claims: int = N_CLAIMS, linked: int | None = None):
    """Claims whose gold passage is close in meaning but shares no word with them, beside a decoy that
    repeats the claim's words but is far in meaning: BM25 clearly hurts here."""
    rng = np.random.default_rng(seed)
    evidence: list[TextNode] = []
    claims: list[TextNode] = []
    table: dict[str, np.ndarray] = {}
    linked = n_claims if linked is None else linked
    for i in range(n_claims):
        c_vec = unit(rng.normal(size=DIM))
        words = [_word(rng) for _ in range(3)]
        text = " ".join(words)
        gold_vec = unit(c_vec + 0.35 * unit(rng.normal(size=DIM)))
        decoy_vec = unit(c_vec + 1.6 * unit(rng.normal(size=DIM)))
        gold_text = " ".join(_word(rng) for _ in range(4))
        decoy_text = " ".join(words + words[:2])
        for node_id, t, v in ((f"g{i}", gold_text, gold_vec), (f"d{i}", decoy_text, decoy_vec)):
            table[t] = v
            evidence.append(_node(node_id, t, v))
        table[text] = c_vec
        meta = {LINKS_KEY: [f"g{i}"]} if i < linked else {}
        claims.append(_node(f"c{i}", text, c_vec, meta))
    for j in range(40):  # fillers
        v = unit(rng.normal(size=DIM))
        t = " ".join(_word(rng) for _ in range(4))
        table[t] = v
        evidence.append(_node(f"f{j}", t, v))
    model = TableEmbedding({k: v.tolist() for k, v in table.items()})
    return evidence, claims, model


@pytest.fixture(scope="module")
def trap():
    evidence, claims, model = lexical_trap_corpus()
    index = faiss_index(evidence, model)
    retriever = ContextAwareRetriever.from_index(index, BASE, claim_nodes=claims, calibrate=True)
    return index, claims, model, retriever


def test_calibrator_drops_the_term_that_hurts(trap):
    _, _, _, retriever = trap
    cal = retriever.corpus.calibration
    assert isinstance(cal, Calibration)
    assert cal.reason == "calibrated"
    assert cal.n_claims == N_CLAIMS
    assert cal.base == BASE
    assert cal.settings.lexical_weight == 0.0  # BM25 pulls the decoys up: off
    assert cal.gain > 0.05 and cal.cv_gain > 0
    assert cal.ndcg == pytest.approx(cal.base_ndcg + cal.gain)
    assert retriever.settings == cal.settings
    assert len(cal.candidates) == 32 and cal.candidates[0]["weights"] == cal.summary()["base_weights"]
    # the settings not calibrated stay the preset's
    assert {
        k: v for k, v in cal.settings.model_dump().items() if k not in ("alpha", "lexical_weight", "claim_contrast")
    } == {k: v for k, v in BASE.model_dump().items() if k not in ("alpha", "lexical_weight", "claim_contrast")}


def test_metadata_carries_the_calibration(trap):
    _, claims, _, retriever = trap
    hits = retriever.retrieve(claims[0].get_content())
    info = hits[0].node.metadata["carag"]["calibration"]
    assert info["weights"] == retriever.corpus.calibration.weights
    assert info["reason"] == "calibrated" and info["n_claims"] == N_CLAIMS
    # another setting on the same corpus is not the calibrated one: no calibration entry
    other = retriever.with_settings(lexical_weight=0.6)
    assert "calibration" not in other.retrieve(claims[0].get_content())[0].node.metadata["carag"]


def ndcg_at_k(retrieved: list[str], gold: set[str], k: int = 10) -> float:
    """Binary-gain nDCG@k, written out here as the reference the calibration's vectorised nDCG must match."""
    dcg = sum(1.0 / math.log2(rank + 2) for rank, node_id in enumerate(retrieved[:k]) if node_id in gold)
    return dcg / sum(1.0 / math.log2(r + 2) for r in range(min(len(gold), k)))


def test_loo_scores_match_the_retriever(trap):
    """Re-weighting the once-computed terms ranks a new claim exactly as the retriever does."""
    index, _, model, retriever = trap
    rng = np.random.default_rng(7)
    for weights in ({}, {"lexical_weight": 0.0}, {"alpha": 1.0, "claim_contrast": 0.0}):
        settings = BASE.replace(**weights)
        live = ContextAwareRetriever(index, retriever.corpus, settings)
        terms = LeaveOneOutTerms(index, retriever.corpus, BASE).fit({})
        for q in range(5):
            gold = [f"g{q}", f"d{q + 1}"]
            vec = unit(retriever.corpus.claim_vectors[q] + 0.4 * unit(rng.normal(size=DIM)))
            text = f"new claim {q}"
            model.add(text, vec)
            terms.claims_.append(terms.claim_terms(text, vec, gold))
            got = [h.node.node_id for h in live.retrieve(text)]
            expected = ndcg_at_k(got, set(gold))
            assert terms.ndcg([settings])[-1, 0] == pytest.approx(expected, abs=1e-9)


def test_left_out_claim_is_not_its_own_competitor(trap):
    index, claims, _, retriever = trap
    terms = LeaveOneOutTerms(index, retriever.corpus, BASE).fit({"c0": ["g0"]})
    names = [s.name for s in terms.scorers_]
    row = terms.claims_[0]
    contrast = row.terms[names.index("claim_contrast")]
    dense = row.terms[names.index("dense")]
    at = int(np.flatnonzero(row.gold)[0])
    assert dense[at] > 0.85  # the gold passage is close to the claim ...
    assert contrast[at] < 0.7  # ... but its contrast is to *other* claims, not to the claim itself
    assert row.query.query_cluster is not None and row.query.claim_id == "c0"


@pytest.mark.parametrize("linked", [0, 10])
def test_too_few_links_keep_the_global_preset(linked):
    evidence, claims, model = lexical_trap_corpus(seed=1, linked=linked)
    index = faiss_index(evidence, model)
    retriever = ContextAwareRetriever.from_index(index, BASE, claim_nodes=claims, calibrate=True)
    cal = retriever.corpus.calibration
    assert cal.settings == BASE and retriever.settings == BASE
    assert cal.n_claims == linked
    assert cal.reason.startswith("too few linked claims")


def test_no_calibration_without_the_flag(trap):
    index, claims, _, _ = trap
    plain = ContextAwareRetriever.from_index(index, BASE, claim_nodes=claims)
    assert plain.corpus.calibration is None and plain.settings == BASE
    assert "calibration" not in plain.retrieve(claims[0].get_content())[0].node.metadata["carag"]


def test_links_from_the_evidence_side():
    evidence, claims, model = lexical_trap_corpus(seed=2, n_claims=5, linked=0)
    evidence = [
        e.model_copy(update={"metadata": {**e.metadata, "claim_id": f"c{e.node_id[1:]}"}})
        if e.node_id.startswith("g")
        else e
        for e in evidence
    ]
    claims[1].metadata[LINKS_KEY] = ["d1", "not-in-the-index"]
    index = faiss_index(evidence, model)
    retriever = ContextAwareRetriever.from_index(index, BASE, claim_nodes=claims)
    links = claim_links(index, retriever.corpus, claims)
    assert links == {f"c{i}": sorted({f"g{i}"} | ({"d1"} if i == 1 else set())) for i in range(5)}
    claims[2].metadata[LINKS_KEY] = "g2"
    with pytest.raises(TypeError, match="list of evidence node ids"):
        claim_links(index, retriever.corpus, claims)


def test_supervised_mode_is_refused(trap):
    index, claims, _, _ = trap
    themed = [c.model_copy(update={"metadata": {**c.metadata, "theme": "T"}}) for c in claims]
    with pytest.raises(ValueError, match="unsupervised"):
        ContextAwareRetriever.from_index(index, BASE, claim_nodes=themed, mode="supervised", calibrate=True)


def test_persist_reload_keeps_the_calibration(tmp_path, trap):
    index, claims, _, retriever = trap
    retriever.persist(tmp_path)
    again = ContextAwareRetriever.from_persist_dir(tmp_path, index=index)
    assert again.settings == retriever.settings
    saved, loaded = retriever.corpus.calibration, again.corpus.calibration
    assert loaded is not None and loaded.to_json() == saved.to_json()
    text = claims[3].get_content()
    assert [h.node.node_id for h in again.retrieve(text)] == [h.node.node_id for h in retriever.retrieve(text)]
    assert again.retrieve(text)[0].node.metadata["carag"]["calibration"] == saved.summary()


def test_refit_calibrates_again(trap, monkeypatch):
    index, claims, _, retriever = trap
    again = ContextAwareRetriever(index, retriever.corpus, retriever.settings)
    calls = []
    real = calibration_module.calibrate_corpus

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(calibration_module, "calibrate_corpus", spy)
    old = again.corpus.calibration
    again.refit()
    assert len(calls) == 1 and calls[0]["links"] == old.links
    new = again.corpus.calibration
    assert new is not old and new.base == old.base  # from the global preset again, not from its own choice
    assert again.settings == new.settings and new.settings.lexical_weight == 0.0


def test_calibrator_rule_by_hand():
    """The rule on a score matrix: the preset unless a candidate gains; ties go to the fewest terms."""
    cal = StageCalibrator(min_claims=4, folds=2)
    cands, _ = cal.candidate_space(BASE)
    scores = np.full((8, len(cands)), 0.5)
    assert cal._choose(scores, cands) != 0  # all tied: the simplest (fewest terms) wins
    assert _terms(cands[cal._choose(scores, cands)]) == 0
    scores = np.tile(np.linspace(0.6, 0.3, len(cands)), (8, 1))  # the preset is best
    assert cal._choose(scores, cands) == 0
    scores[:, 5] += 0.5
    assert cal._choose(scores, cands) == 5 and cal._cv_gain(scores, cands) > 0


def _terms(s) -> int:
    return int(s.alpha < 1) + int(s.lexical_weight > 0) + int(s.claim_contrast > 0)
