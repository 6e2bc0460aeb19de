"""stores.index_store: an index store that writes LlamaIndex's index struct when it is read, not per edit."""

from __future__ import annotations

import asyncio
import json

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.data_structs.data_structs import KeywordTable
from llama_index.core.storage.index_store.simple_index_store import SimpleIndexStore
from llama_index.core.storage.index_store.types import BaseIndexStore
from llama_index.core.storage.index_store.utils import index_struct_to_json

from llama_index_carag import ContextAwareRetriever
from llama_index_carag.retrieval import updates
from llama_index_carag.retrieval.fitting import fit_corpus
from llama_index_carag.settings import PAPER
from llama_index_carag.stores.faiss_adapter import load_faiss_index
from llama_index_carag.stores.index_store import DeferredIndexStore
from tests.helpers import faiss_index, planted_corpus


def _index(nodes, emb, index_store: BaseIndexStore) -> VectorStoreIndex:
    """A FAISS id-map index over ``nodes`` with ``index_store``, its id fixed (the same JSON for two stores)."""
    import faiss

    from llama_index_carag.stores.faiss_store import SafeFaissMapVectorStore

    store = SafeFaissMapVectorStore(faiss_index=faiss.IndexIDMap2(faiss.IndexFlatIP(len(nodes[0].embedding))))
    storage = StorageContext.from_defaults(vector_store=store, index_store=index_store)
    index = VectorStoreIndex([n.model_copy() for n in nodes], storage_context=storage, embed_model=emb)
    index.set_index_id("ix")
    return index


@pytest.fixture()
def corpus(rng):
    return planted_corpus(rng)


@pytest.fixture()
def edited(corpus):
    """An index on a DeferredIndexStore, flushed once (``before``: the wrapped store's JSON), then edited."""
    evidence, claims, emb = corpus
    index = _index(evidence[:-4], emb, DeferredIndexStore())
    fitted = fit_corpus(
        index, claims, PAPER.replace(n_clusters=3), embed_model=emb, theme_key="theme", claim_key="claim_id"
    )
    store = index.storage_context.index_store
    inner = store.inner  # flushed
    before = json.dumps(inner.to_dict())
    updates.insert_nodes(index, fitted, [e.model_copy() for e in evidence[-4:]])
    updates.delete_nodes(index, fitted, [evidence[0].node_id, evidence[5].node_id])
    return index, inner, before


def test_it_is_a_base_index_store():
    store = DeferredIndexStore()
    assert isinstance(store, BaseIndexStore) and isinstance(store.inner, SimpleIndexStore)
    assert store.index_structs() == [] and store.pending == []


def test_an_edit_defers_the_write_until_the_store_is_read(edited, corpus):
    index, inner, before = edited
    evidence = corpus[0]
    store = index.storage_context.index_store
    assert store.pending == ["ix"]
    assert json.dumps(inner.to_dict()) == before  # not written by the edits
    expected = {e.node_id for e in evidence} - {evidence[0].node_id, evidence[5].node_id}
    assert set(index.index_struct.nodes_dict) == expected
    assert set(store.get_index_struct("ix").nodes_dict) == expected  # read: written first
    assert store.pending == []
    assert store.to_dict() == inner.to_dict() == {"index_store/data": {"ix": index_struct_to_json(index.index_struct)}}


@pytest.mark.parametrize("read", ["get_index_struct", "get_index_struct_default", "index_structs", "to_dict"])
def test_each_read_writes_first(edited, read):
    index, inner, _ = edited
    store = index.storage_context.index_store
    if read == "get_index_struct_default":
        store.get_index_struct()
    else:
        getattr(store, read)()
    assert store.pending == []
    assert inner.to_dict()["index_store/data"]["ix"] == index_struct_to_json(index.index_struct)


@pytest.mark.parametrize("read", ["aget_index_struct", "async_index_structs"])
def test_the_async_reads_write_first(edited, read):
    index, inner, _ = edited
    store = index.storage_context.index_store
    structs = asyncio.run(getattr(store, read)())
    struct = structs[0] if isinstance(structs, list) else structs
    assert struct.nodes_dict == index.index_struct.nodes_dict
    assert store.pending == []
    assert inner.to_dict()["index_store/data"]["ix"] == index_struct_to_json(index.index_struct)


def test_async_add_is_deferred_too(edited):
    index, inner, before = edited
    store = index.storage_context.index_store
    store.flush()
    index.index_struct.nodes_dict["extra"] = "extra"
    asyncio.run(store.async_add_index_struct(index.index_struct))
    assert store.pending == ["ix"] and "extra" not in json.dumps(inner.to_dict())
    assert "extra" in asyncio.run(store.aget_index_struct("ix")).nodes_dict


def test_persist_writes_what_llama_index_writes(corpus, tmp_path):
    """The same edits on a plain SimpleIndexStore and on a DeferredIndexStore persist the same file."""
    evidence, _, emb = corpus
    paths = {}
    for name, index_store in (("plain", SimpleIndexStore()), ("deferred", DeferredIndexStore())):
        index = _index(evidence[:-4], emb, index_store)
        index.insert_nodes([e.model_copy() for e in evidence[-4:]])  # LlamaIndex's own edits
        index.delete_nodes([evidence[0].node_id, evidence[5].node_id], delete_from_docstore=True)
        index_store.persist(str(tmp_path / name / "index_store.json"))
        paths[name] = tmp_path / name / "index_store.json"
    assert paths["deferred"].read_bytes() == paths["plain"].read_bytes()


def test_a_persisted_index_reloads_with_its_edits(edited, corpus, tmp_path):
    index, _, _ = edited
    evidence, _, emb = corpus
    index.storage_context.persist(str(tmp_path))
    loaded = load_faiss_index(tmp_path, emb, id_map=True)
    assert isinstance(loaded.storage_context.index_store, DeferredIndexStore)
    assert loaded.index_struct.nodes_dict == index.index_struct.nodes_dict
    assert evidence[-1].node_id in loaded.index_struct.nodes_dict
    assert evidence[0].node_id not in loaded.index_struct.nodes_dict
    plain = SimpleIndexStore()
    plain.add_index_struct(index.index_struct)
    plain.persist(str(tmp_path / "plain.json"))
    assert (tmp_path / "index_store.json").read_bytes() == (tmp_path / "plain.json").read_bytes()


def test_llama_index_own_later_edits_are_written(edited, corpus):
    index, inner, _ = edited
    evidence = corpus[0]
    store = index.storage_context.index_store
    store.flush()
    index.delete_nodes([evidence[1].node_id], delete_from_docstore=True)  # LlamaIndex's own edit
    assert store.pending == ["ix"]
    assert evidence[1].node_id in json.dumps(inner.to_dict())  # not written yet
    assert evidence[1].node_id not in store.get_index_struct("ix").nodes_dict
    stored = inner.to_dict()["index_store/data"]["ix"]
    assert stored == index_struct_to_json(index.index_struct) and evidence[1].node_id not in stored["__data__"]


def test_delete_and_other_structs(edited):
    index, inner, _ = edited
    store = index.storage_context.index_store
    table = KeywordTable(index_id="k")
    store.add_index_struct(table)  # not an IndexDict: written at once, the pending one before it
    assert store.pending == []
    assert set(inner.to_dict()["index_store/data"]) == {"ix", "k"}
    store.add_index_struct(index.index_struct)
    store.delete_index_struct("ix")
    assert store.pending == [] and store.get_index_struct("ix") is None
    asyncio.run(store.adelete_index_struct("k"))
    assert store.index_structs() == []


def test_the_package_builds_and_loads_with_it_but_leaves_a_users_index_alone(corpus):
    evidence, claims, emb = corpus
    index = faiss_index(evidence[:-1], emb, id_map=True)  # the user's own index
    store = index.storage_context.index_store
    attributes = dict(vars(store))
    retriever = ContextAwareRetriever.from_index(
        index, PAPER.replace(n_clusters=3), claim_nodes=claims, embed_model=emb, theme_key="theme", claim_key="claim_id"
    )
    retriever.insert_nodes([evidence[-1].model_copy()])
    retriever.delete_nodes([evidence[0].node_id])
    assert index.storage_context.index_store is store and type(store) is SimpleIndexStore
    assert vars(store).keys() == attributes.keys()  # nothing patched on it
    stored = store.get_index_struct(index.index_id)
    assert stored.nodes_dict == index.index_struct.nodes_dict  # LlamaIndex wrote each edit itself


def test_build_faiss_index_uses_it(corpus):
    from llama_index_carag.retrieval.indexing import build_faiss_index

    evidence, _, emb = corpus
    index = build_faiss_index(evidence, emb, id_map=True)
    store = index.storage_context.index_store
    assert isinstance(store, DeferredIndexStore) and store.pending == [index.index_id]
    assert store.get_index_struct(index.index_id).nodes_dict == index.index_struct.nodes_dict
