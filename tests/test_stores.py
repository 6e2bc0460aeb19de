"""backends: every vector store behind the one adapter protocol gives the same ids, vectors and edits."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.vector_stores.types import BasePydanticVectorStore, VectorStoreQueryResult

from llama_index_carag.stores.adapter_protocol import StoreClustering, VectorStoreAdapter
from llama_index_carag.stores.base_adapter import GenericAdapter
from llama_index_carag.stores.vector_stores import (
    PERSISTED_KINDS,
    adapter_for,
    get_node_embeddings,
    load_persisted_index,
)
from tests.helpers import faiss_index, planted_corpus, simple_index


class DictStore(BasePydanticVectorStore):
    """A minimal store CARAG has no adapter for: nodes (with embeddings) in a dict."""

    stores_text: bool = False
    _nodes: dict = PrivateAttr(default_factory=dict)

    @property
    def client(self) -> Any:
        return None

    def add(self, nodes: list[Any], **kwargs: Any) -> list[str]:
        self._nodes.update({n.node_id: n for n in nodes})
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
        self._nodes.pop(ref_doc_id, None)

    def delete_nodes(self, node_ids=None, filters=None, **kwargs: Any) -> None:
        for i in node_ids or []:
            self._nodes.pop(i, None)

    def get_nodes(self, node_ids=None, filters=None) -> list[Any]:
        return [self._nodes[i] for i in node_ids or [] if i in self._nodes]

    def query(self, query: Any, **kwargs: Any) -> VectorStoreQueryResult:
        ids = list(self._nodes)
        sims = [float(np.dot(self._nodes[i].embedding, query.query_embedding)) for i in ids]
        order = np.argsort(sims)[::-1][: query.similarity_top_k]
        return VectorStoreQueryResult(ids=[ids[r] for r in order], similarities=[sims[r] for r in order])


def dict_index(nodes, emb):
    return VectorStoreIndex(
        [n.model_copy() for n in nodes],
        storage_context=StorageContext.from_defaults(vector_store=DictStore()),
        embed_model=emb,
    )


def qdrant(nodes, emb):
    pytest.importorskip("qdrant_client")
    pytest.importorskip("llama_index.vector_stores.qdrant")
    from tests.test_qdrant import qdrant_index, with_uuid_ids

    return qdrant_index(with_uuid_ids(nodes), emb)


BUILDERS = {
    "faiss": lambda nodes, emb: faiss_index(nodes, emb),
    "faiss_map": lambda nodes, emb: faiss_index(nodes, emb, id_map=True),
    "simple": simple_index,
    "QdrantVectorStore": qdrant,
    "DictStore": dict_index,
}


@pytest.fixture()
def corpus(rng):
    evidence, _, emb = planted_corpus(rng, n_themes=2, claims_per_theme=2, evidence_per_claim=3)
    return evidence, emb


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_each_store_reads_back_ids_and_vectors(corpus, kind):
    evidence, emb = corpus
    index = BUILDERS[kind](evidence, emb)
    adapter = adapter_for(index)
    assert isinstance(adapter, VectorStoreAdapter) and adapter.kind == kind
    assert isinstance(adapter, GenericAdapter) == (kind == "DictStore")
    ids = adapter.node_ids()
    assert len(ids) == len(evidence) == len(set(ids))
    by_id = dict(zip(ids, adapter.embeddings(ids)))
    vectors = {tuple(np.round(v, 5)) for v in by_id.values()}
    assert vectors == {tuple(np.round(np.asarray(n.embedding, np.float32), 5)) for n in evidence}
    assert adapter.persisted == (kind in PERSISTED_KINDS)
    assert (adapter.metric() == "inner_product") == kind.startswith("faiss")
    assert (adapter.size() == len(evidence)) == (kind in ("faiss", "faiss_map", "simple"))
    backend = adapter.store_clustering()
    assert (backend is not None) == (kind == "QdrantVectorStore")
    assert backend is None or isinstance(backend, StoreClustering)
    with pytest.raises(ValueError, match="has no embedding|not in the Qdrant collection"):
        adapter.embeddings([ids[0], "00000000-0000-0000-0000-000000000000"])


@pytest.mark.parametrize("kind", list(BUILDERS))
def test_each_store_inserts_and_deletes_through_its_adapter(corpus, kind):
    evidence, emb = corpus
    index = BUILDERS[kind](evidence[:-1], emb)
    adapter = adapter_for(index)
    extra = evidence[-1]
    if kind == "QdrantVectorStore":
        from tests.test_qdrant import with_uuid_ids

        extra = with_uuid_ids([extra])[0]
    adapter.insert([extra.model_copy()])
    assert extra.node_id in adapter.node_ids()
    np.testing.assert_allclose(adapter.embeddings([extra.node_id])[0], extra.embedding, rtol=1e-5)
    if kind == "faiss":
        with pytest.raises(ValueError, match="cannot delete nodes.*id_map=True"):
            adapter.delete([extra.node_id])
        return
    adapter.delete([extra.node_id])
    assert extra.node_id not in adapter.node_ids() and index.docstore.get_node(extra.node_id, raise_error=False) is None


@pytest.mark.parametrize("kind", PERSISTED_KINDS)
def test_persisted_kinds_reload_from_disk(corpus, kind, tmp_path):
    evidence, emb = corpus
    index = BUILDERS[kind](evidence, emb)
    index.storage_context.persist(persist_dir=str(tmp_path))
    again = load_persisted_index(tmp_path, emb, kind)
    assert adapter_for(again).kind == kind
    ids, vectors = get_node_embeddings(index)
    ids2, vectors2 = get_node_embeddings(again, ids)
    np.testing.assert_allclose(vectors2, vectors)


def test_kinds_not_on_disk_and_missing_folders_are_refused(tmp_path, corpus):
    evidence, emb = corpus
    with pytest.raises(ValueError, match="not saved on disk"):
        load_persisted_index(tmp_path, emb, "QdrantVectorStore")
    with pytest.raises(FileNotFoundError, match="docstore.json"):
        load_persisted_index(tmp_path, emb, "faiss")
    with pytest.raises(ValueError, match="not saved on disk"):
        GenericAdapter.load_index(tmp_path, emb)


def test_async_search_is_native_only_where_the_store_has_one(corpus):
    evidence, emb = corpus
    assert not adapter_for(faiss_index(evidence, emb)).native_async()
    assert not adapter_for(simple_index(evidence, emb)).native_async()
