"""Edits without re-serialising the index struct: LlamaIndex's index store written once, when it is read.

``VectorStoreIndex.insert_nodes`` and ``delete_nodes`` end with ``index_store.add_index_struct(index_struct)``,
which serialises the whole ``IndexDict`` (one ``nodes_dict`` entry per passage) through ``dataclasses_json``:
at 100k passages that is ~4 s of an edit of 1,000 passages, O(corpus) for an O(batch) change.

:func:`deferred_index_struct` wraps such an edit.  On LlamaIndex's in-memory ``SimpleIndexStore`` the
write is deferred: the struct is remembered, and written the next time the store is read, persisted,
exported or written again (those methods of that store object flush it first), so what the store hands out is
always what it holds today.  Other key-value index stores (Redis, Mongo, …; shared with other processes) are
written at once, with :func:`index_struct_json` (the same JSON, without ``dataclasses_json``'s per-field
overhead); any other index store is left to LlamaIndex.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from llama_index.core.constants import DATA_KEY, TYPE_KEY
from llama_index.core.data_structs.data_structs import IndexDict
from llama_index.core.storage.index_store.keyval_index_store import KVIndexStore
from llama_index.core.storage.index_store.simple_index_store import SimpleIndexStore
from llama_index.core.storage.index_store.utils import index_struct_to_json

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.data_structs.data_structs import IndexStruct

__all__ = ["index_struct_json", "deferred_index_struct", "flush_index_struct"]

_PENDING = "_carag_pending_index_struct"
#: The methods of a ``SimpleIndexStore`` that flush a deferred struct before they run.
_FLUSHING = (
    "persist",
    "to_dict",
    "get_index_struct",
    "index_structs",
    "add_index_struct",
    "delete_index_struct",
    "aget_index_struct",
    "async_index_structs",
    "async_add_index_struct",
    "adelete_index_struct",
)


def index_struct_json(struct: IndexStruct) -> dict[str, Any]:
    """What LlamaIndex's ``index_struct_to_json`` gives, without ``dataclasses_json`` for a plain ``IndexDict``
    (its fields are str, optional str and dicts of str / lists, which ``json.dumps`` writes the same way)."""
    if type(struct) is not IndexDict:
        return index_struct_to_json(struct)
    fields = {f.name: getattr(struct, f.name) for f in dataclasses.fields(struct)}
    return {TYPE_KEY: struct.get_type(), DATA_KEY: json.dumps(fields)}


def _write(store: KVIndexStore, struct: IndexStruct) -> None:
    store._kvstore.put(struct.index_id, index_struct_json(struct), collection=store._collection)


def flush_index_struct(store: Any) -> None:
    """Write the struct an edit deferred on ``store`` (no-op when none is pending)."""
    struct = store.__dict__.pop(_PENDING, None)
    if struct is not None:
        _write(store, struct)


def _flushing(store: SimpleIndexStore, name: str) -> Callable[..., Any]:
    method = getattr(type(store), name)
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def amethod(*args: Any, **kwargs: Any) -> Any:
            flush_index_struct(store)
            return await method(store, *args, **kwargs)

        return amethod

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        flush_index_struct(store)
        return method(store, *args, **kwargs)

    return wrapper


def _install_flushing(store: SimpleIndexStore) -> None:
    for name in _FLUSHING:
        if name not in store.__dict__ and hasattr(type(store), name):
            setattr(store, name, _flushing(store, name))


@contextmanager
def deferred_index_struct(index: VectorStoreIndex) -> Iterator[None]:
    """Run an insert or delete on ``index`` with the index store's ``add_index_struct`` deferred (see the module)."""
    store = index.storage_context.index_store
    if not isinstance(store, KVIndexStore):
        yield
        return
    written: list[IndexStruct] = []
    saved = store.__dict__.get("add_index_struct")
    store.add_index_struct = written.append  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        if saved is None:
            del store.add_index_struct
        else:
            store.add_index_struct = saved  # type: ignore[method-assign]
        if written:
            struct = written[-1]
            pending = store.__dict__.get(_PENDING)
            if pending is not None and pending.index_id != struct.index_id:
                flush_index_struct(store)  # another index's struct in the same store: written now
            if type(store) is SimpleIndexStore:
                _install_flushing(store)
                store.__dict__[_PENDING] = struct
            else:
                _write(store, struct)
