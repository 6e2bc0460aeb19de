"""Qdrant behind the vector-store adapter protocol; its collection also keeps CARAG's clusters.

:class:`QdrantAdapter` lists point ids and fetches vectors with the client's public ``scroll`` /
``retrieve``; :class:`QdrantClustering` fits the thematic context on the server
(:func:`~llama_index_carag.stores.qdrant_fit.fit_qdrant_context`: clusters in the payloads)
and rebuilds a saved one (:class:`~llama_index_carag.stores.qdrant_clusters.QdrantClusterStore`);
:class:`~llama_index_carag.ranking.bm25.QdrantBM25Placement` keeps BM25 in a sparse vector.
The integration is optional: nothing here imports ``qdrant_client`` until a Qdrant store is used.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.stores.base_adapter import StoreAdapter
from llama_index_carag.stores.qdrant_clusters import QdrantClusterStore, QdrantCollection, is_qdrant_store

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.core.context import ThematicContext
    from llama_index_carag.core.corpus_items import CorpusItems
    from llama_index_carag.ranking.bm25 import QdrantBM25Placement

logger = logging.getLogger(__name__)


class QdrantClustering:
    """Clusters kept in a Qdrant collection's payloads (a :class:`~llama_index_carag.stores.adapter_protocol.StoreClustering`)."""

    name = "qdrant"

    def __init__(self, vector_store: Any) -> None:
        self.vector_store = vector_store

    def fit_context(
        self, claims: CorpusItems, *, mode: str, theme_key: str, claim_key: str, show_progress: bool, **options: Any
    ) -> tuple[ThematicContext, list[str]]:
        from llama_index_carag.stores.qdrant_fit import fit_qdrant_context

        context = fit_qdrant_context(
            self.vector_store,
            claims,
            mode=mode,  # type: ignore[arg-type]
            theme_key=theme_key,
            claim_key=claim_key,
            show_progress=show_progress,
            **options,
        )
        store = context.cluster_store_
        return context, list(store.exclude) if isinstance(store, QdrantClusterStore) else []

    def restore_store(self, info: Mapping[str, Any], dim: int, unit_vectors: Any) -> QdrantClusterStore:
        return QdrantClusterStore.from_state(info, self.vector_store, dim, unit_vectors)


class QdrantAdapter(StoreAdapter):
    """``QdrantVectorStore`` (local mode or a server); ids must be UUIDs, as Qdrant requires."""

    kind = "QdrantVectorStore"

    @classmethod
    def handles(cls, vector_store: Any) -> bool:
        return is_qdrant_store(vector_store)

    @property
    def collection(self) -> QdrantCollection:
        return QdrantCollection(self.store)

    def node_ids(self) -> list[str]:
        return [str(p.id) for page in self.collection.scroll(with_vectors=False, payload=False) for p in page]

    def embeddings(self, ids: Sequence[str], *, copy: bool = True) -> np.ndarray:
        collection = self.collection
        found = {
            str(p.id): collection.vector(p) for p in collection.retrieve(list(ids), with_vectors=True, payload=False)
        }
        missing = [i for i in ids if i not in found]
        if missing:
            raise ValueError(f"Node {missing[0]!r} is not in the Qdrant collection {collection.name!r}.")
        return np.asarray([found[i] for i in ids], dtype=np.float32)

    def native_async(self) -> bool:
        # Its async search needs the async client, which the integration keeps private (no accessor).
        return super().native_async() and getattr(self.store, "_aclient", None) is not None

    def store_clustering(self) -> QdrantClustering:
        return QdrantClustering(self.store)

    def bm25_placement(self, *, show_progress: bool = False) -> QdrantBM25Placement:
        from llama_index_carag.ranking.bm25 import QdrantBM25Placement

        return QdrantBM25Placement(self.store, show_progress=show_progress)
