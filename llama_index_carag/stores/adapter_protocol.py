"""The vector-store adapter protocol: everything CARAG asks of a ``VectorStoreIndex``'s store.

CARAG clusters the embeddings the index already holds, keeps its cluster table in line with
inserts and deletes, and saves a state that must match the index when it is loaded again.
Each vector store keeps ids and embeddings its own way; a :class:`VectorStoreAdapter` hides
that, so nothing outside :mod:`llama_index_carag.stores` names a store kind:

* :class:`~llama_index_carag.stores.faiss_adapter.FaissAdapter` /
  :class:`~llama_index_carag.stores.faiss_adapter.FaissMapAdapter` (``FaissVectorStore``,
  ``FaissMapVectorStore``), :class:`~llama_index_carag.stores.simple_adapter.SimpleAdapter`
  (LlamaIndex's ``SimpleVectorStore``), :class:`~llama_index_carag.stores.qdrant_adapter.QdrantAdapter`,
  and :class:`~llama_index_carag.stores.vector_stores.GenericAdapter` for any other store whose
  nodes carry their embeddings;
* :func:`~llama_index_carag.stores.vector_stores.adapter_for` picks one for an index.

A store that keeps CARAG's clusters itself (Qdrant: in the point payloads) also gives a
:class:`StoreClustering`; the others are clustered in memory.  A store that keeps the BM25 index
itself (Qdrant: a sparse vector) gives a
:class:`~llama_index_carag.ranking.bm25.BM25Placement`; the others run BM25 in process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.schema import BaseNode
    from llama_index.core.storage.docstore.types import BaseDocumentStore

    from llama_index_carag.core.cluster_store import ClusterStore
    from llama_index_carag.core.context import ThematicContext
    from llama_index_carag.core.corpus_items import CorpusItems
    from llama_index_carag.core.store_rows import StoreRows
    from llama_index_carag.ranking.bm25 import BM25Placement


@runtime_checkable
class StoreClustering(Protocol):
    """Fits and reloads a thematic context whose evidence clusters live in the vector store.

    Attributes:
        name: recorded in the saved context (its ``"backend"`` entry), checked when it is loaded.
    """

    name: str

    def fit_context(
        self, claims: CorpusItems, *, mode: str, theme_key: str, claim_key: str, show_progress: bool, **options: Any
    ) -> tuple[ThematicContext, list[str]]:
        """Cluster the store's points plus ``claims``; ``(context, ids of claims stored as points)``.

        ``options``: ``n_clusters``, ``random_state``, ``clusterer_params``.
        """
        ...

    def restore_store(self, info: Mapping[str, Any], dim: int, unit_vectors: Any) -> ClusterStore:
        """The cluster store of a saved context (``unit_vectors(ids)``: the claims' unit vectors)."""
        ...


@runtime_checkable
class VectorStoreAdapter(Protocol):
    """One index's vector store, as CARAG reads and edits it.

    Attributes:
        kind: the store kind recorded in saved states (``"faiss"``, ``"faiss_map"``, ``"simple"``,
            ``"QdrantVectorStore"``, or the store's class name).
        persisted: ``index.storage_context.persist`` saves the store, so a state can reload its
            index from disk (:meth:`load_index`).
        index: the adapted index.
    """

    persisted: ClassVar[bool]
    index: VectorStoreIndex

    @property
    def kind(self) -> str:
        """The store kind recorded in saved states."""
        ...

    @classmethod
    def handles(cls, vector_store: Any) -> bool:
        """True when this adapter is the one for ``vector_store``."""
        ...

    def node_ids(self) -> list[str]:
        """Ids of the nodes the store can return, in storage order.

        Raises:
            ValueError: the store cannot list them.
        """
        ...

    def embeddings(self, ids: Sequence[str], *, copy: bool = True) -> np.ndarray:
        """Stored embeddings of ``ids``, shape ``(len(ids), d)`` float32, rows in the order of ``ids``
        (``copy=False`` may give a read-only view of the store's memory: use it before the store changes).

        Raises:
            ValueError: a node has no stored embedding.
        """
        ...

    def size(self) -> int | None:
        """Cheap change signal: the number of vectors (``None`` when unknown)."""
        ...

    def metric(self) -> str | None:
        """``"inner_product"`` / ``"l2"`` where the store has a fixed metric (FAISS), else ``None``."""
        ...

    def insert(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> None:
        """Embed (where needed) and add ``nodes`` through the index."""
        ...

    def delete(self, node_ids: Sequence[str], **delete_kwargs: Any) -> None:
        """Delete ``node_ids`` from the store and the docstore.

        Raises:
            ValueError: the store cannot delete (says which store can).
        """
        ...

    def native_async(self) -> bool:
        """True when the store's async query is its own and usable (else it runs in a thread)."""
        ...

    def store_clustering(self) -> StoreClustering | None:
        """The clustering kept in the store itself (its fit and reload), or ``None`` (clustered in memory)."""
        ...

    def bm25_placement(self, *, show_progress: bool = False) -> BM25Placement | None:
        """The placement that keeps the BM25 index in the store, or ``None`` (BM25 in process)."""
        ...

    def store_rows(self) -> StoreRows | None:
        """The store's own vectors lent in place to the in-memory clusters (FAISS flat), or ``None`` (the
        clusters keep a copy)."""
        ...

    @classmethod
    def load_index(
        cls, folder: str | os.PathLike[str], embed_model: BaseEmbedding, *, docstore: BaseDocumentStore | None = None
    ) -> VectorStoreIndex:
        """Reload an index of this kind saved under ``folder`` (``persisted`` kinds only), its nodes read from
        ``docstore`` when given (DuckDB, Redis, …), else from the folder's ``docstore.json``.

        Raises:
            FileNotFoundError: nothing saved there.
            ValueError: the files cannot be read as this kind, or the kind is not saved on disk.
        """
        ...
