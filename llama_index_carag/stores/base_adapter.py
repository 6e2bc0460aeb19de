"""What most vector-store adapters share, and the adapter for any store CARAG has no adapter for.

:class:`StoreAdapter` holds the index and gives the
:class:`~llama_index_carag.stores.adapter_protocol.VectorStoreAdapter` methods that only use LlamaIndex's
public index API (insert, delete, async detection, no clustering in the store); a concrete adapter
overrides what its store does its own way.  :class:`GenericAdapter` reads ids from the index's
node list and embeddings from the nodes the store (or the docstore) returns.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from llama_index.core.vector_stores.types import BasePydanticVectorStore

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.schema import BaseNode
    from llama_index.core.storage.docstore.types import BaseDocumentStore

    from llama_index_carag.core.store_rows import StoreRows
    from llama_index_carag.ranking.bm25 import BM25Placement
    from llama_index_carag.stores.adapter_protocol import StoreClustering

logger = logging.getLogger(__name__)


class StoreAdapter:
    """Shared defaults of the adapters (see :class:`~llama_index_carag.stores.adapter_protocol.VectorStoreAdapter`).

    Args:
        index: the ``VectorStoreIndex`` whose store is adapted.
    """

    kind: ClassVar[str] = ""
    persisted: ClassVar[bool] = False
    #: What to do instead when the store cannot delete (appended to the error).
    delete_hint: ClassVar[str] = "use a vector store that can delete nodes."

    def __init__(self, index: VectorStoreIndex) -> None:
        self.index = index

    @property
    def store(self) -> Any:
        """The index's vector store."""
        return self.index.vector_store

    def size(self) -> int | None:
        return None

    def metric(self) -> str | None:
        return None

    def insert(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> None:
        self.index.insert_nodes(list(nodes), **insert_kwargs)

    def delete(self, node_ids: Sequence[str], **delete_kwargs: Any) -> None:
        try:
            self.index.delete_nodes(list(node_ids), delete_from_docstore=True, **delete_kwargs)
        except NotImplementedError:
            raise ValueError(f"{type(self.store).__name__} cannot delete nodes; {self.delete_hint}") from None

    def native_async(self) -> bool:
        return type(self.store).aquery is not BasePydanticVectorStore.aquery

    def store_clustering(self) -> StoreClustering | None:
        return None

    def bm25_placement(self, *, show_progress: bool = False) -> BM25Placement | None:
        return None

    def store_rows(self) -> StoreRows | None:
        return None

    @classmethod
    def load_index(
        cls, folder: str | os.PathLike[str], embed_model: BaseEmbedding, *, docstore: BaseDocumentStore | None = None
    ) -> VectorStoreIndex:
        raise ValueError(f"A {cls.kind or 'custom'} index is not saved on disk; pass index=... to reload it.")


class GenericAdapter(StoreAdapter):
    """Any other store: ids from the index's node list, embeddings from the nodes it (or the docstore) returns."""

    delete_hint = "build the index with an id-mapped FAISS index (build_faiss_index(..., id_map=True))."

    @property
    def kind(self) -> str:  # type: ignore[override]  # per-store class name; the others' kind is a ClassVar
        return type(self.store).__name__

    @classmethod
    def handles(cls, vector_store: Any) -> bool:
        return True

    def node_ids(self) -> list[str]:
        nodes_dict = getattr(self.index.index_struct, "nodes_dict", None) or {}
        if nodes_dict:
            return list(nodes_dict.values())
        raise ValueError(
            f"Cannot list the nodes of a {type(self.store).__name__} index: CARAG supports FAISS, "
            "the simple vector store and Qdrant (or any store whose index keeps a node list)."
        )

    def embeddings(self, ids: Sequence[str], *, copy: bool = True) -> np.ndarray:
        ids = list(ids)
        nodes: list[Any] = []
        try:
            nodes = list(self.store.get_nodes(node_ids=ids))
        except (NotImplementedError, TypeError, AttributeError, ValueError):
            nodes = []
        by_id = {n.node_id: n.embedding for n in nodes if getattr(n, "embedding", None) is not None}
        if len(by_id) < len(ids):
            for node in self.index.docstore.get_nodes([i for i in ids if i not in by_id], raise_error=False):
                if node is not None and node.embedding is not None:
                    by_id[node.node_id] = node.embedding
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ValueError(
                f"Node {missing[0]!r} has no embedding that a {type(self.store).__name__} returns; "
                "CARAG needs the corpus embeddings once, at fit time."
            )
        return np.asarray([by_id[i] for i in ids], dtype=np.float32)
