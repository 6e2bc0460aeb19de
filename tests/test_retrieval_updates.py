"""retrieval.updates: insert, delete and sync on a fitted corpus without refitting; the tables are told."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_carag.retrieval import updates
from llama_index_carag.retrieval.fitting import fit_corpus
from llama_index_carag.settings import PAPER
from llama_index_carag.stores.vector_stores import index_node_ids
from tests.helpers import faiss_index, planted_corpus, simple_index


class Recorder:
    """A fitted table that records what it is told and keeps itself (or not)."""

    name = key = "recorder"

    def __init__(self, keep):
        self.keep, self.changes = keep, []

    def update(self, corpus, changed):
        self.changes.append(sorted(changed))
        return self.keep


@pytest.fixture()
def fitted(rng):
    evidence, claims, emb = planted_corpus(rng)
    index = simple_index(evidence[:-4], emb)
    corpus = fit_corpus(
        index, claims, PAPER.replace(n_clusters=3), embed_model=emb, theme_key="theme", claim_key="claim_id"
    )
    kept, dropped = Recorder(True), Recorder(False)
    corpus.tables.update({"kept": kept, "dropped": dropped})
    return index, corpus, evidence, claims, kept, dropped


def test_insert_adds_to_the_context_and_tells_the_tables(fitted):
    index, corpus, evidence, claims, kept, dropped = fitted
    new = [e.model_copy() for e in evidence[-4:]]
    assert updates.insert_nodes(index, corpus, new)
    assert set(corpus.evidence_ids()) == {e.node_id for e in evidence}
    assert (
        kept.changes == [sorted(e.node_id for e in new)]
        and "dropped" not in corpus.tables
        and corpus.tables["kept"] is kept
    )
    assert not updates.insert_nodes(index, corpus, [])
    with pytest.raises(ValueError, match="duplicated node ids"):
        updates.insert_nodes(index, corpus, [new[0], new[0]])


def test_reinsert_replaces_and_a_claim_becomes_excluded(fitted):
    index, corpus, evidence, claims, kept, _ = fitted
    n = len(corpus.evidence_ids())
    updates.insert_nodes(index, corpus, [evidence[0].model_copy()])
    assert len(corpus.evidence_ids()) == n and corpus.evidence_ids().count(evidence[0].node_id) == 1
    assert updates.insert_nodes(index, corpus, [claims[0].model_copy()])
    assert claims[0].node_id in corpus.exclude_ids and len(corpus.evidence_ids()) == n


def test_delete_removes_and_skips_excluded_ids(fitted):
    index, corpus, evidence, claims, kept, _ = fitted
    assert updates.delete_nodes(index, corpus, [evidence[1].node_id])
    assert evidence[1].node_id not in corpus.evidence_ids()
    assert evidence[1].node_id not in index_node_ids(index)
    assert updates.nodes_by_id(index, [evidence[1].node_id, evidence[2].node_id])[0] is None
    assert kept.changes[-1] == [evidence[1].node_id]
    corpus.exclude([evidence[2].node_id])
    assert not updates.delete_nodes(index, corpus, [evidence[2].node_id])  # excluded ids are not evidence


def test_a_store_that_cannot_delete_says_which_can(rng):
    evidence, claims, emb = planted_corpus(rng)
    index = faiss_index(evidence, emb)
    corpus = fit_corpus(
        index, claims, PAPER.replace(n_clusters=3), embed_model=emb, theme_key="theme", claim_key="claim_id"
    )
    with pytest.raises(ValueError, match="cannot delete nodes.*id_map=True"):
        updates.delete_nodes(index, corpus, [evidence[0].node_id])


def test_sync_picks_up_direct_edits(fitted):
    index, corpus, evidence, claims, kept, _ = fitted
    assert updates.sync(index, corpus) == (0, 0) and kept.changes == [[]]
    index.insert_nodes([TextNode(id_=e.node_id, text=e.text, embedding=e.embedding) for e in evidence[-4:]])
    index.delete_nodes([evidence[0].node_id], delete_from_docstore=True)
    assert updates.sync(index, corpus) == (4, 1)
    assert kept.changes[-1] == sorted([evidence[0].node_id] + [e.node_id for e in evidence[-4:]])
    assert updates.store_size(index) == len(evidence) - 1


def test_claims_come_back_as_nodes_and_refit_keeps_them(fitted):
    index, corpus, evidence, claims, _, _ = fitted
    back = updates.claim_nodes_of(corpus)
    assert [c.node_id for c in back] == [c.node_id for c in claims]
    assert [c.text for c in back] == [c.text for c in claims]
    np.testing.assert_allclose([c.embedding for c in back], [c.embedding for c in claims], rtol=1e-6)
    assert all(b.metadata["claim_id"] == c.metadata["claim_id"] for b, c in zip(back, claims))
    again = updates.refit_corpus(index, corpus, PAPER.replace(n_clusters=3), embed_model=None)  # claims carry vectors
    assert (
        again is not corpus
        and again.claim_ids == corpus.claim_ids
        and set(again.evidence_ids()) == set(corpus.evidence_ids())
    )
    assert again.tables == {}  # PAPER uses no fitted table
