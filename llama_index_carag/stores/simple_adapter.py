"""LlamaIndex's in-memory ``SimpleVectorStore`` behind the vector-store adapter protocol.

Ids and embeddings come from its public ``data.embedding_dict``; it deletes, and
``storage_context.persist`` saves it as JSON.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.stores.base_adapter import StoreAdapter

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.storage.docstore.types import BaseDocumentStore


class SimpleAdapter(StoreAdapter):
    """``SimpleVectorStore``: its ``embedding_dict`` is the node list and the vectors."""

    kind = "simple"
    persisted = True

    @classmethod
    def handles(cls, vector_store: Any) -> bool:
        from llama_index.core.vector_stores.simple import SimpleVectorStore

        return isinstance(vector_store, SimpleVectorStore)

    def node_ids(self) -> list[str]:
        return list(self.store.data.embedding_dict)

    def embeddings(self, ids: Sequence[str], *, copy: bool = True) -> np.ndarray:
        table = self.store.data.embedding_dict
        missing = [i for i in ids if i not in table or table[i] is None]
        if missing:
            raise ValueError(f"Node {missing[0]!r} has no embedding in the vector store.")
        return np.asarray([table[i] for i in ids], dtype=np.float32)

    def size(self) -> int | None:
        return len(self.store.data.embedding_dict)

    @classmethod
    def load_index(
        cls, folder: str | os.PathLike[str], embed_model: BaseEmbedding, *, docstore: BaseDocumentStore | None = None
    ) -> VectorStoreIndex:
        from llama_index.core import StorageContext, load_index_from_storage

        from llama_index_carag.stores.index_store import DeferredIndexStore

        if docstore is None and not (Path(folder) / "docstore.json").is_file():
            raise FileNotFoundError(f"No persisted index in {folder} (missing docstore.json).")
        storage = StorageContext.from_defaults(
            persist_dir=str(folder), index_store=DeferredIndexStore.from_persist_dir(str(folder)), docstore=docstore
        )
        return load_index_from_storage(storage, embed_model=embed_model)  # type: ignore[return-value]
