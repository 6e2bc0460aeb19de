"""Behaviour regression: FactVer top-6 (ids, order, scores) for the papers' and the tuned settings.

The golden file ``tests/data/factver_top6_golden.json`` was recorded from the code
*before* the settings/ranking refactor (issue 10); every later version must give the
same top-6 (ids, order, scores to 1e-6) with MiniLM, on FAISS and on Qdrant local mode.

Re-record (only when a change of behaviour is intended and explained)::

    .venv/bin/python -m tests.test_regression --record
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

GOLDEN = Path(__file__).parent / "data" / "factver_top6_golden.json"
N_CLAIMS = 40
#: Provenance fields compared besides ids and scores.
FIELDS = ("cluster", "query_cluster", "soi_size", "fallback", "reranked", "in_soi", "soi_kind")
FLOAT_FIELDS = ("claim_similarity", "thematic_similarity")


def configs() -> dict[str, dict[str, Any]]:
    from llama_index_carag.retrieval.retriever import PAPER_SETTINGS, TUNED_SETTINGS

    return {
        "paper-CARAG-u": {"mode": "unsupervised", **PAPER_SETTINGS},
        "paper-CARAG": {"mode": "supervised", **PAPER_SETTINGS},
        "tuned-CARAG-u": {"mode": "unsupervised", **PAPER_SETTINGS, **TUNED_SETTINGS},
    }


def uuid_nodes(index: Any) -> list[Any]:
    """The FactVer evidence of ``index`` with UUID ids (Qdrant's rule) and their embeddings set."""
    from llama_index_carag.datasets import uuid_node_id
    from llama_index_carag.backends.vector_stores import get_node_embeddings

    ids, vectors = get_node_embeddings(index)
    return [
        n.model_copy(update={"id_": uuid_node_id(n.node_id), "embedding": v.tolist()})
        for n, v in zip(index.docstore.get_nodes(ids), vectors)
    ]


def build_index(backend: str, nodes: list[Any], embed_model: Any) -> Any:
    from llama_index.core import StorageContext, VectorStoreIndex

    if backend == "faiss":
        from tests.helpers import faiss_index

        return faiss_index(nodes, embed_model)
    import qdrant_client
    from llama_index.vector_stores.qdrant import QdrantVectorStore

    store = QdrantVectorStore(client=qdrant_client.QdrantClient(location=":memory:"), collection_name="regression")
    context = StorageContext.from_defaults(vector_store=store)
    return VectorStoreIndex([n.model_copy() for n in nodes], storage_context=context, embed_model=embed_model)


def claim_slice(claims: list[Any]) -> list[Any]:
    step = max(1, len(claims) // N_CLAIMS)
    return claims[::step][:N_CLAIMS]


def top6(index: Any, claims: list[Any], config: dict[str, Any]) -> list[dict[str, Any]]:
    from llama_index.core.schema import QueryBundle

    from llama_index_carag import ContextAwareRetriever

    retriever = ContextAwareRetriever.from_index(index, "paper", claim_nodes=claims, **config)
    out = []
    for claim in claim_slice(claims):
        got = retriever.retrieve(QueryBundle(claim.text, embedding=claim.embedding))
        out.append(
            {
                "claim": claim.node_id,
                "ids": [n.node.node_id for n in got],
                "scores": [float(n.score) for n in got],
                "carag": [{k: n.node.metadata["carag"][k] for k in FIELDS + FLOAT_FIELDS} for n in got],
            }
        )
    return out


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def regression_nodes(factver_index) -> list[Any]:
    return uuid_nodes(factver_index)


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["faiss", "qdrant"])
def test_factver_top6_unchanged(golden, regression_nodes, factver_claims, minilm, backend):
    if backend == "qdrant":
        pytest.importorskip("qdrant_client")
        pytest.importorskip("llama_index.vector_stores.qdrant")
    index = build_index(backend, regression_nodes, minilm)
    for name, config in configs().items():
        expected = golden[backend][name]
        got = top6(index, factver_claims, config)
        assert [g["claim"] for g in got] == [e["claim"] for e in expected]
        for g, e in zip(got, expected):
            where = f"{backend}/{name}/claim {e['claim']}"
            assert g["ids"] == e["ids"], where
            np.testing.assert_allclose(g["scores"], e["scores"], atol=1e-6, rtol=0, err_msg=where)
            for gi, ei in zip(g["carag"], e["carag"]):
                assert {k: gi[k] for k in FIELDS} == {k: ei[k] for k in FIELDS}, where
                for k in FLOAT_FIELDS:
                    if ei[k] is None:
                        assert gi[k] is None, where
                    else:
                        assert gi[k] == pytest.approx(ei[k], abs=1e-6), where


def _record() -> None:  # pragma: no cover - run by hand
    from tests.conftest import FACTVER_CSV

    from llama_index.core.schema import MetadataMode

    from llama_index_carag.datasets import load_factver
    from llama_index_carag.retrieval.indexing import build_faiss_index
    from llama_index_carag.models.resolve import resolve_embed_model

    model = resolve_embed_model("minilm")
    corpus = load_factver(FACTVER_CSV)
    nodes = uuid_nodes(build_faiss_index(corpus.evidence_nodes, model, show_progress=True))
    claims = [n.model_copy() for n in corpus.claim_nodes]
    for node, vector in zip(claims, model.get_text_embedding_batch([n.get_content(MetadataMode.EMBED) for n in claims])):
        node.embedding = vector
    out: dict[str, Any] = {"n_claims": N_CLAIMS, "embed_model": "minilm"}
    for backend in ("faiss", "qdrant"):
        index = build_index(backend, nodes, model)
        out[backend] = {name: top6(index, claims, config) for name, config in configs().items()}
    GOLDEN.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":  # pragma: no cover
    import sys

    if "--record" in sys.argv:
        _record()
