"""Fitting an index's archive decision on its labelled claims, saving it with the index, and using it in a check."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag.retrieval.retriever import ContextAwareRetriever
from llama_index_carag.verdicts import archive_fit
from llama_index_carag.verdicts.archive_fit import (
    DECISION_FILE,
    archive_signals,
    fit_archive_decision,
    index_archive_decision,
    labelled_claims,
    save_archive_decision,
    saved_archive_decision,
)
from llama_index_carag.verdicts.types import VerdictLabel
from tests.helpers import faiss_index, planted_corpus

LABEL_OF_THEME = {"T0": "T", "T1": "F", "T2": "N"}


@pytest.fixture(scope="module")
def archive():
    """36 labelled claims whose label follows their theme (so the claim's embedding carries it), and a retriever."""
    evidence, claims, embed = planted_corpus(np.random.default_rng(3), claims_per_theme=12, evidence_per_claim=3)
    claims = [
        c.model_copy(update={"metadata": {**c.metadata, "label": LABEL_OF_THEME[c.metadata["theme"]]}}) for c in claims
    ]
    retriever = ContextAwareRetriever.from_index(
        faiss_index(evidence, embed), "paper", claim_nodes=claims, n_clusters=3, random_state=0
    )
    return retriever, claims


@pytest.fixture(scope="module")
def fitted(archive):
    """The archive decision of :func:`archive`, fitted once for the module."""
    retriever, claims = archive
    return fit_archive_decision(retriever, claims)


def test_labelled_claims_read_t_f_n_and_full_names_and_skip_the_rest() -> None:
    nodes = [TextNode(id_=str(i), text="c", metadata={"label": v}) for i, v in enumerate(["T", "REFUTED", "", "maybe"])]
    nodes.append(TextNode(id_="x", text="c"))
    assert [(n.node_id, label) for n, label in labelled_claims(nodes)] == [
        ("0", VerdictLabel.SUPPORTED),
        ("1", VerdictLabel.REFUTED),
    ]


def test_every_claim_is_retrieved_by_a_retriever_fitted_without_it(archive) -> None:
    retriever, claims = archive
    signals = archive_signals(retriever, claims, claims[:10], folds=2)
    assert len(signals) == 10
    assert [s.claim for s in signals] == [c.get_content() for c in claims[:10]]
    assert all(len(s.texts) == len(s.cosines) == retriever.settings.similarity_top_k for s in signals)
    assert all(-1.0 <= c <= 1.0 for s in signals for c in s.cosines)


def test_fit_keeps_a_model_when_the_labels_follow_the_features(fitted) -> None:
    decision = fitted
    assert decision.n_labelled_ == 36 and decision.label_counts_ == {
        "SUPPORTED": 12,
        "REFUTED": 12,
        "NOT_ENOUGH_INFO": 12,
    }
    assert decision.has_model and max(decision.cv_scores_.values()) > 0.9
    assert decision.feature_names_[:4] == [
        "cosine_max",
        "cosine_mean",
        "number_mismatch_share",
        "negation_mismatch_share",
    ]
    assert decision.fit_seconds_ > 0


def test_too_few_labelled_claims_keep_no_model(archive) -> None:
    retriever, claims = archive
    decision = fit_archive_decision(retriever, claims[:12] + claims[24:30])
    assert not decision.has_model and decision.fallback_ == "too_few"


def test_saved_with_the_index_and_refused_for_another_encoder(fitted, tmp_path, caplog) -> None:
    decision = fitted
    path = save_archive_decision(tmp_path, decision, "enc-a")
    assert path.name == DECISION_FILE
    back = saved_archive_decision(tmp_path, "enc-a")
    assert back is not None and back.reason() == decision.reason()
    with caplog.at_level(logging.WARNING):
        assert saved_archive_decision(tmp_path, "enc-b") is None
    assert "fitted with the encoder enc-a, not enc-b" in caplog.text
    assert saved_archive_decision(tmp_path / "nothing") is None
    (tmp_path / DECISION_FILE).write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a carag-index-verdict-decision/1 file"):
        saved_archive_decision(tmp_path)


def test_an_index_without_one_says_so_once(tmp_path, caplog, monkeypatch) -> None:
    monkeypatch.setattr(archive_fit, "_HINTED", set())
    with caplog.at_level(logging.WARNING):
        assert index_archive_decision(tmp_path, None) is None
        assert index_archive_decision(tmp_path, None) is None
    assert caplog.text.count("has no archive decision") == 1 and "carag index DATA --calibrate" in caplog.text


def test_the_synthesizer_decides_with_the_archive_and_shows_the_cues(archive, fitted, tmp_path) -> None:
    from llama_index_carag.verdicts.check import ClaimChecker
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    from .tiny_llm import tiny_hf_llm

    retriever, claims = archive
    decision = fitted
    synthesizer = FactCheckSynthesizer(
        tiny_hf_llm(tmp_path), embed_model=retriever.embed_model, archive_decision=decision, decision="llm"
    )
    result = ClaimChecker(retriever, synthesizer).check(claims[0].get_content())
    verdict = result.verdict
    assert verdict is not None and verdict.decision == "archive"
    assert verdict.decision_reason.startswith("archive decision fitted on 36 labelled claims")
    assert verdict.passage_cues is not None and len(verdict.passage_cues) == len(result.evidence)
    assert all(row.cues == [] for row in result.evidence)  # the planted texts state no numbers, no negation


def test_serve_builds_its_synthesizers_with_the_decision_saved_in_the_index(archive, fitted, tmp_path) -> None:
    from llama_index_carag.models.resolve import embed_model_name
    from llama_index_carag.serve.llm_worker import serve_synthesizers
    from llama_index_carag.verdicts.archive_fit import save_archive_decision
    from llama_index_carag.verdicts.decision import ArchiveLabelDecision
    from llama_index_carag.verdicts.synthesizer import get_fact_check_synthesizer

    from .tiny_llm import tiny_hf_llm

    retriever, _ = archive
    llm = tiny_hf_llm(tmp_path)
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    save_archive_decision(index_dir, fitted, embed_model_name(retriever.embed_model))
    synthesizer, _streaming = serve_synthesizers(llm, retriever.embed_model, str(index_dir))
    assert synthesizer.decision.name == "verifier"  # serve's default: the verifier decides
    own = get_fact_check_synthesizer(llm, embed_model=retriever.embed_model, archive_decision=fitted, decision="llm")
    assert isinstance(own.decision, ArchiveLabelDecision) and own.decision.archive.reason() == fitted.reason()
    served, streaming = serve_synthesizers(llm, retriever.embed_model, str(index_dir), decision="llm")
    assert isinstance(served.decision, ArchiveLabelDecision) and served.decision.archive.reason() == fitted.reason()
    assert isinstance(streaming.decision, ArchiveLabelDecision)  # carag serve --decision llm: both paths
