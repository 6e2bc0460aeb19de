"""Edits give the same top-k as before edits were made O(batch): a golden file written by the code before
(``tests/data/edits_top_k_golden.json``: fit, insert 6, delete 4, on a fixed planted corpus), and an insert
undone by a delete gives back the fitted retriever's results."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import QueryBundle

from llama_index_carag import ContextAwareRetriever
from tests.helpers import faiss_index, planted_corpus

GOLDEN = Path(__file__).parent / "data" / "edits_top_k_golden.json"


@pytest.fixture()
def fitted():
    evidence, claims, emb = planted_corpus(np.random.default_rng(0), evidence_per_claim=8)
    index = faiss_index(evidence[:-6], emb, id_map=True)
    r = ContextAwareRetriever.from_index(index, "default", claim_nodes=claims, n_clusters=3)
    queries = [QueryBundle(c.text, embedding=c.embedding) for c in claims]

    def top() -> list:
        return [[[n.node.node_id, round(float(n.score), 6)] for n in r.retrieve(q)] for q in queries]

    return r, evidence, top


def test_insert_and_delete_give_the_golden_top_k(fitted):
    r, evidence, top = fitted
    golden = json.loads(GOLDEN.read_text())
    assert top() == golden["fit"]
    r.insert_nodes([e.model_copy() for e in evidence[-6:]])
    assert top() == golden["insert"]
    r.delete_nodes([evidence[i].node_id for i in (0, 7, 13, 40)])
    assert top() == golden["delete"]


def test_an_insert_undone_by_a_delete_gives_the_fitted_top_k(fitted):
    r, evidence, top = fitted
    before = top()
    r.insert_nodes([e.model_copy() for e in evidence[-6:]])
    assert top() != before
    r.delete_nodes([e.node_id for e in evidence[-6:]])
    assert top() == before
