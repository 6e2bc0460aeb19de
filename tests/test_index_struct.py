"""stores.index_struct: edits defer LlamaIndex's index-struct write; what the index store hands out stays current."""

from __future__ import annotations

import json

import pytest
from llama_index.core import StorageContext, load_index_from_storage
from llama_index.core.data_structs.data_structs import IndexDict, KeywordTable
from llama_index.core.storage.index_store.keyval_index_store import KVIndexStore
from llama_index.core.storage.index_store.utils import index_struct_to_json
from llama_index.core.storage.kvstore.simple_kvstore import SimpleKVStore

from llama_index_carag.retrieval import updates
from llama_index_carag.retrieval.fitting import fit_corpus
from llama_index_carag.settings import PAPER
from llama_index_carag.stores.index_struct import deferred_index_struct, index_struct_json
from tests.helpers import faiss_index, planted_corpus


def test_fast_json_is_llama_index_json():
    struct = IndexDict(index_id="ix", summary='sümmary "q"')
    struct.nodes_dict.update({"a": "a", "é\n": "é\n", "3": "x"})
    struct.doc_id_dict["d"] = ["a", "b"]
    assert index_struct_json(struct) == index_struct_to_json(struct)
    assert index_struct_json(IndexDict(index_id="e")) == index_struct_to_json(IndexDict(index_id="e"))
    other = KeywordTable(index_id="k")
    assert index_struct_json(other) == index_struct_to_json(other)  # not an IndexDict: LlamaIndex's own


@pytest.fixture()
def edited(rng):
    evidence, claims, emb = planted_corpus(rng)
    index = faiss_index(evidence[:-4], emb, id_map=True)
    corpus = fit_corpus(
        index, claims, PAPER.replace(n_clusters=3), embed_model=emb, theme_key="theme", claim_key="claim_id"
    )
    store = index.storage_context.index_store
    written = json.dumps(store.to_dict())
    updates.insert_nodes(index, corpus, [e.model_copy() for e in evidence[-4:]])
    updates.delete_nodes(index, corpus, [evidence[0].node_id, evidence[5].node_id])
    return index, emb, evidence, written


def test_an_edit_defers_the_write_until_the_store_is_read(edited):
    index, _, evidence, before = edited
    store = index.storage_context.index_store
    assert json.dumps(store._kvstore.to_dict()) == before  # not written by the edits
    expected = {e.node_id for e in evidence[-4:]} | {e.node_id for e in evidence[:-4]}
    expected -= {evidence[0].node_id, evidence[5].node_id}
    assert set(index.index_struct.nodes_dict) == expected
    assert set(store.get_index_struct(index.index_id).nodes_dict) == expected  # read: flushed first
    assert store.to_dict() == {"index_store/data": {index.index_id: index_struct_to_json(index.index_struct)}}


def test_persist_after_edits_reloads_the_edited_index(edited, tmp_path):
    index, emb, evidence, _ = edited
    index.storage_context.persist(str(tmp_path))
    from llama_index_carag.stores.faiss_store import SafeFaissMapVectorStore

    storage = StorageContext.from_defaults(
        persist_dir=str(tmp_path), vector_store=SafeFaissMapVectorStore.from_persist_dir(str(tmp_path))
    )
    loaded = load_index_from_storage(storage, embed_model=emb)
    assert loaded.index_struct.nodes_dict == index.index_struct.nodes_dict
    assert (
        evidence[-1].node_id in loaded.index_struct.nodes_dict
        and evidence[0].node_id not in loaded.index_struct.nodes_dict
    )


def test_an_edit_after_a_flush_is_deferred_again(edited):
    index, _, evidence, _ = edited
    store = index.storage_context.index_store
    store.to_dict()  # flushed
    with deferred_index_struct(index):
        index.delete_nodes([evidence[1].node_id], delete_from_docstore=True)
    assert evidence[1].node_id in json.dumps(store._kvstore.to_dict())  # stale underneath
    assert evidence[1].node_id not in store.get_index_struct(index.index_id).nodes_dict


def test_a_shared_key_value_store_is_written_at_once(rng):
    evidence, _, emb = planted_corpus(rng)
    index = faiss_index(evidence[:-1], emb, id_map=True)
    shared = KVIndexStore(SimpleKVStore())  # stands for Redis, Mongo, …: other processes read it
    index.storage_context.index_store = shared
    with deferred_index_struct(index):
        index.insert_nodes([evidence[-1].model_copy()])
    stored = shared._kvstore.get(index.index_id, collection="index_store/data")
    assert stored == index_struct_to_json(index.index_struct)
    assert "add_index_struct" not in shared.__dict__


def test_after_a_flush_llama_index_writes_its_own_edits(edited):
    index, _, evidence, _ = edited
    store = index.storage_context.index_store
    assert "add_index_struct" in store.__dict__  # the flushing methods are installed
    index.delete_nodes([evidence[2].node_id], delete_from_docstore=True)  # LlamaIndex's own, not deferred
    stored = store._kvstore.get(index.index_id, collection="index_store/data")
    assert stored == index_struct_to_json(index.index_struct) and evidence[2].node_id not in stored["__data__"]


def test_the_async_methods_flush_too(edited):
    import asyncio

    index, _, evidence, _ = edited
    store = index.storage_context.index_store
    struct = asyncio.run(store.aget_index_struct(index.index_id))
    assert struct.nodes_dict == index.index_struct.nodes_dict
