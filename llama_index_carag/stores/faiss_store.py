"""A ``FaissMapVectorStore`` whose ids never collide after deletes.

The upstream ``FaissMapVectorStore.add`` gives each new vector the FAISS id
``ntotal`` (the current number of vectors).  After a delete ``ntotal`` shrinks,
so the next insert reuses the id of a vector that is still there: two nodes
then share one FAISS id and a search returns the wrong node.  Re-adding an
existing node id also leaves a stale duplicate behind.

:class:`SafeFaissMapVectorStore` keeps the upstream file format and behaviour
but gives new vectors ids above every id in use (never one that is still
taken), and replaces the old vector when a node id is added again, so no node
is ever lost or duplicated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.vector_stores.faiss import FaissMapVectorStore


class SafeFaissMapVectorStore(FaissMapVectorStore):
    """``FaissMapVectorStore`` with collision-free ids and replace-on-re-add."""

    @classmethod
    def class_name(cls) -> str:
        return "SafeFaissMapVectorStore"

    def faiss_ids(self) -> Mapping[str, int]:
        """``{node id: FAISS id}`` of the stored vectors, in insertion order (a live read-only view)."""
        return MappingProxyType(self._node_id_to_faiss_id_map)

    def _next_id(self) -> int:
        used = self._faiss_id_to_node_id_map
        return (max(used) + 1) if used else int(self.client.ntotal)

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Add nodes; a node id that is already stored has its vector replaced."""
        if not nodes:
            return []
        latest = {n.node_id: n for n in nodes}  # a node id given twice: the last one wins
        nodes = list(latest.values())
        replaced = [n.node_id for n in nodes if n.node_id in self._node_id_to_faiss_id_map]
        if replaced:
            self.delete_nodes(node_ids=replaced)
        start = self._next_id()
        vectors = np.asarray([n.get_embedding() for n in nodes], dtype="float32")
        ids = np.arange(start, start + len(nodes), dtype=np.int64)
        self.client.add_with_ids(vectors, ids)
        new_ids = []
        for node, faiss_id in zip(nodes, ids.tolist()):
            self._node_id_to_faiss_id_map[node.node_id] = faiss_id
            self._faiss_id_to_node_id_map[faiss_id] = node.node_id
            new_ids.append(node.node_id)
        return new_ids
