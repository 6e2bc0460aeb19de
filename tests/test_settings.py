"""CaragSettings: one frozen model for every option; presets; one validator; persisted as its JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from llama_index_carag import DEFAULT, PAPER, CaragSettings, ContextAwareRetriever
from llama_index_carag.core.persistence import MANIFEST_NAME, StateError
from llama_index_carag.ranking import CandidatePool, RankQuery
from llama_index_carag.settings import PRESETS, TUNED
from tests.helpers import faiss_index, planted_corpus

#: The papers' settings, written out: PAPER must keep meaning exactly this.
PAPER_VALUES = {
    "mode": "unsupervised",
    "n_clusters": 10,
    "random_state": 0,
    "covariance_type": "diag",
    "alpha": 0.5,
    "delta": 0.75,
    "similarity_top_k": 6,
    "soi_top_m": None,
    "soi_min_size": 0,
    "rerank_candidates": None,
    "dedupe": False,
    "soi_claims": 0,
    "hub_penalty": 0.0,
    "hub_k": 20,
    "claim_contrast": 0.0,
    "contrast_threshold": 0.9,
    "lexical_weight": 0.0,
}


def test_presets():
    assert PRESETS["paper"] == PAPER and PRESETS["tuned"] == TUNED and PRESETS["default"] == DEFAULT
    assert TUNED.rerank_candidates == 50 and TUNED.claim_contrast == 0.1 and TUNED.alpha == 0.8
    assert CaragSettings.from_options("tuned", alpha=0.7) == TUNED.replace(alpha=0.7)
    with pytest.raises(ValidationError):
        TUNED.alpha = 0.1  # frozen


def test_no_arguments_is_the_package_default_and_paper_is_named():
    """CaragSettings() is DEFAULT, what from_index uses; PAPER is the papers' values, by name."""
    assert CaragSettings() == DEFAULT and CaragSettings.from_options() == DEFAULT
    assert CaragSettings.from_options("default") == DEFAULT and CaragSettings.from_options("paper") == PAPER
    assert {k: getattr(PAPER, k) for k in PAPER_VALUES} == PAPER_VALUES
    default = (DEFAULT.alpha, DEFAULT.soi_min_size, DEFAULT.rerank_candidates, DEFAULT.lexical_weight)
    assert default + (DEFAULT.claim_contrast,) == (0.8, 3, 50, 0.6, 0.45)
    differ = ("alpha", "soi_min_size", "rerank_candidates", "lexical_weight", "claim_contrast")
    assert DEFAULT.replace(**{k: PAPER_VALUES[k] for k in differ}) == PAPER
    assert CaragSettings(alpha=0.7) == DEFAULT.replace(alpha=0.7)  # keywords change the default
    with pytest.raises(ValueError, match="claim_contrast needs rerank_candidates.*PAPER"):
        CaragSettings(rerank_candidates=None)  # the default's re-ranking terms need their pool


@pytest.mark.parametrize(
    "options, exc, match",
    [
        ({"alpha": "x"}, TypeError, "alpha must be a number"),
        ({"alpha": 1.5}, ValueError, r"alpha must be in \[0, 1\]"),
        ({"delta": 2}, ValueError, "delta must be in"),
        ({"similarity_top_k": 0}, ValueError, "similarity_top_k must be >= 1"),
        ({"soi_claims": "x"}, TypeError, "soi_claims must be a non-negative integer"),
        ({"soi_claims": -1}, ValueError, "soi_claims must be a non-negative integer"),
        ({"hub_penalty": 0.1}, ValueError, "hub_penalty needs rerank_candidates"),
        ({"claim_contrast": 0.1}, ValueError, "claim_contrast needs rerank_candidates"),
        ({"mode": "both"}, ValueError, "mode must be"),
        ({"n_clusters": "many"}, ValueError, "n_clusters must be"),
        ({"no_such_option": 1}, TypeError, "Unknown CARAG option"),
    ],
)
def test_one_validator_for_every_entry_point(options, exc, match):
    with pytest.raises(exc, match=match):
        CaragSettings.from_options(PAPER, **options)
    with pytest.raises(exc, match=match):
        PAPER.replace(**options) if "no_such_option" not in options else CaragSettings.from_options(PAPER, **options)


def test_every_field_is_documented_and_json_round_trips():
    for name, info in CaragSettings.model_fields.items():
        assert info.description, name
    assert CaragSettings.model_validate_json(TUNED.model_dump_json()) == TUNED


@pytest.fixture()
def fitted(rng, tmp_path):
    evidence, claims, emb = planted_corpus(rng)
    index = faiss_index(evidence, emb)
    r = ContextAwareRetriever.from_index(
        index, TUNED, claim_nodes=claims, n_clusters=3, delta=0.3, rerank_candidates=10
    )
    r.persist(tmp_path)
    return r, index, claims, tmp_path


def test_retriever_stores_settings_and_persists_them_as_json(fitted):
    r, index, claims, folder = fitted
    assert r.settings == TUNED.replace(n_clusters=3, delta=0.3, rerank_candidates=10)
    for name in CaragSettings.model_fields:  # every option readable on the retriever, from one place
        assert getattr(r, name) == getattr(r.settings, name)
    saved = json.loads((folder / "carag" / MANIFEST_NAME).read_text())["info"]["settings"]
    assert {k: saved[k] for k in CaragSettings.model_fields} == json.loads(r.settings.model_dump_json())
    back = ContextAwareRetriever.from_persist_dir(folder, index=index)
    assert back.settings == r.settings
    assert [n.node.node_id for n in back.retrieve(claims[0].text)] == [
        n.node.node_id for n in r.retrieve(claims[0].text)
    ]


def test_unreadable_saved_settings_say_to_refit(fitted):
    r, index, claims, folder = fitted
    path = folder / "carag" / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    manifest["info"]["settings"]["alpha"] = "high"
    path.write_text(json.dumps(manifest))
    with pytest.raises(StateError, match="re-fit"):
        ContextAwareRetriever.from_persist_dir(folder, index=index)


class ConstantBoost:
    """A throw-away extra scorer: how the lead plugs a new term in (no edit of the stage)."""

    name = "boost"

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id

    def scores(self, pool: CandidatePool, query: RankQuery) -> np.ndarray:
        return np.array([1.0 if i == self.node_id else 0.0 for i in pool.ids])

    def weight(self, settings: CaragSettings, query: RankQuery) -> float:
        return 10.0


def test_a_new_scorer_plugs_into_the_stage(fitted):
    r, index, claims, folder = fitted
    last = r.retrieve(claims[0].text)[-1].node.node_id
    boosted = ContextAwareRetriever(r.index, r.corpus, r.settings, scorers=[ConstantBoost(last)])
    top = boosted.retrieve(claims[0].text)[0]
    assert top.node.node_id == last and top.node.metadata["carag"]["terms"]["boost"] == 1.0
