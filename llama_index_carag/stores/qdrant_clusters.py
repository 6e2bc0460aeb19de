"""CARAG on a Qdrant collection: clusters in the point payloads, SOIs built on the server.

:class:`QdrantClusterStore` is the :class:`~llama_index_carag.core.cluster_store.ClusterStore`
adapter for a ``QdrantVectorStore``; :func:`fit_qdrant_context` fits a
:class:`~llama_index_carag.core.context.ThematicContext` on one.  The client never holds
the corpus embeddings:

* **fit** lists the points, fetches only the random sample each mixture is fitted on
  (at most ``max_fit_samples`` vectors, in the same canonical order as the in-memory
  fit, so both give the same clusters), then scrolls the collection in batches,
  predicts each point's cluster and writes it into the point's payload
  (``carag_cluster``);
* **an SOI** is one filtered vector query: points of the claim's cluster (and, for
  CARAG, theme) whose cosine similarity to the claim is above ``delta``; only those
  points' vectors come back, to average into ``T``.

The claims (few) stay in memory, in a :class:`MemoryClusterStore`.  Point ids must be
UUIDs (Qdrant's rule); the loaders' ``uuid_ids=True`` gives stable ones.  Works against
Qdrant's embedded local mode (``QdrantClient(path=...)`` or ``":memory:"``) and a
Qdrant server alike (``QdrantClient(url=...)``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from llama_index_carag.core.cluster_store import ClusterGroup, GroupKey, MemoryClusterStore, TextsOf
from llama_index_carag.core.soi import ClusterMembers, SOICore
from llama_index_carag.core.store_rows import StoreHits
from llama_index_carag.core.vectors import l2_normalize

logger = logging.getLogger(__name__)

#: Payload key that holds each point's cluster.
CLUSTER_PAYLOAD_KEY = "carag_cluster"
_PAGE = 1024


def is_qdrant_store(vector_store: Any) -> bool:
    """True for a LlamaIndex ``QdrantVectorStore``."""
    try:
        from llama_index.vector_stores.qdrant import QdrantVectorStore
    except ImportError:  # the integration is optional
        return False
    return isinstance(vector_store, QdrantVectorStore)


class QdrantCollection:
    """The calls CARAG makes on one collection of a ``QdrantVectorStore`` (scroll, fetch, filter, payload)."""

    def __init__(self, vector_store: Any, theme_key: str = "theme", claim_key: str = "claim_id") -> None:
        self.vector_store = vector_store
        self.theme_key = theme_key
        self.claim_key = claim_key

    @property
    def client(self) -> Any:
        return self.vector_store.client

    @property
    def name(self) -> str:
        return self.vector_store.collection_name

    @property
    def using(self) -> str | None:
        return self.vector_store.dense_vector_name or None

    def vector(self, point: Any) -> np.ndarray:
        """A point's dense vector, shape ``(d,)``."""
        vector = point.vector
        if isinstance(vector, dict):
            vector = vector[self.using or ""]
        return np.asarray(vector, dtype=np.float32)

    def scroll(
        self, *, with_vectors: bool, payload: list[str] | bool, scroll_filter: Any = None
    ) -> Iterator[list[Any]]:
        """Every point (matching ``scroll_filter``), page by page."""
        offset = None
        while True:
            points, offset = self.client.scroll(
                self.name,
                scroll_filter=scroll_filter,
                limit=_PAGE,
                offset=offset,
                with_vectors=with_vectors,
                with_payload=payload,
            )
            if points:
                yield points
            if offset is None:
                return

    def retrieve(self, ids: Sequence[str], *, with_vectors: bool, payload: list[str] | bool) -> list[Any]:
        out: list[Any] = []
        for start in range(0, len(ids), _PAGE):
            out += self.client.retrieve(
                self.name, ids=list(ids[start : start + _PAGE]), with_vectors=with_vectors, with_payload=payload
            )
        return out

    def cluster_filter(self, key: GroupKey, exclude: Sequence[str]) -> Any:
        """Points of cluster ``key`` (and its theme), without the ``exclude`` ids."""
        from qdrant_client import models

        must = [models.FieldCondition(key=CLUSTER_PAYLOAD_KEY, match=models.MatchValue(value=int(key[1])))]
        if key[0] is not None:
            must.append(models.FieldCondition(key=self.theme_key, match=models.MatchValue(value=key[0])))
        must_not = [models.HasIdCondition(has_id=list(exclude))] if exclude else None
        return models.Filter(must=must, must_not=must_not)

    def set_payload(self, payload: Mapping[str, Any], ids: Sequence[str]) -> None:
        self.client.set_payload(self.name, payload=dict(payload), points=list(ids))


class QdrantClusterStore:
    """:class:`~llama_index_carag.core.cluster_store.ClusterStore` whose evidence lives in a Qdrant collection.

    Args:
        collection: the collection.
        supervised: CARAG (themes and claim links in the payloads) rather than CARAG-u.
        dim: the vectors' dimension.
        claims: the claims, held in memory.
        counts: ``{(theme, cluster): evidence points}``.
        exclude: ids of claims stored as points, never evidence.
    """

    def __init__(
        self,
        collection: QdrantCollection,
        *,
        supervised: bool,
        dim: int,
        claims: MemoryClusterStore,
        counts: Mapping[GroupKey, int],
        exclude: Sequence[str] = (),
    ) -> None:
        self.collection = collection
        self.supervised = supervised
        self.dim = dim
        self.claims = claims
        self.counts = dict(counts)
        self.exclude = list(exclude)

    # ---------------------------------------------------------------- reading
    def __len__(self) -> int:
        return sum(self.counts.values()) + len(self.claims)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.claims or bool(
            self.collection.retrieve([str(node_id)], with_vectors=False, payload=False)
        )

    def keys(self) -> list[GroupKey]:
        return sorted(set(self.counts) | set(self.claims.keys()), key=lambda k: (str(k[0]), k[1]))

    def size(self, key: GroupKey) -> int:
        return self.counts.get(key, 0) + self.claims.size(key)

    def key_of(self, node_id: str) -> GroupKey | None:
        key = self.claims.key_of(node_id)
        if key is not None:
            return key
        found = self.collection.retrieve(
            [node_id], with_vectors=False, payload=[CLUSTER_PAYLOAD_KEY, self.collection.theme_key]
        )
        payload = (found[0].payload or {}) if found else {}
        if CLUSTER_PAYLOAD_KEY not in payload:
            return None
        return (self._theme(payload), int(payload[CLUSTER_PAYLOAD_KEY]))

    def vectors_and_clusters(self, node_ids: Sequence[str]) -> tuple[list[np.ndarray | None], list[int | None]]:
        """Unit vectors and clusters of several nodes with one round trip."""
        local_vectors, local_clusters = self.claims.vectors_and_clusters(node_ids)
        remote = [i for i, v in zip(node_ids, local_vectors) if v is None]
        points = {
            str(p.id): p for p in self.collection.retrieve(remote, with_vectors=True, payload=[CLUSTER_PAYLOAD_KEY])
        }
        vectors, clusters = list(local_vectors), list(local_clusters)
        for r, node_id in enumerate(node_ids):
            point = points.get(node_id) if vectors[r] is None else None
            if point is not None:
                vectors[r] = l2_normalize(self.collection.vector(point))
                payload = point.payload or {}
                clusters[r] = int(payload[CLUSTER_PAYLOAD_KEY]) if CLUSTER_PAYLOAD_KEY in payload else None
        return vectors, clusters

    def query_members(
        self,
        key: GroupKey,
        query_unit: np.ndarray,
        delta: float,
        top_m: int | None,
        texts: TextsOf | None,
        *,
        min_size: int = 0,
        nearest: StoreHits | None = None,
    ) -> ClusterMembers:
        """The cluster's points above ``delta`` (one filtered query, paged), then its claims; when fewer than
        ``min_size`` pass, the ``min_size`` nearest points instead (supervised: the whole cluster, as the
        claim-link filter comes after)."""
        if self.supervised:
            top_m = None  # the cap applies after the claim-link filter, in supervised_core
        points = self._points(key, query_unit, float(delta), top_m, texts)
        if len(points) < min_size:
            if self.supervised:
                return self.members(key, texts)
            points = self._points(key, query_unit, None, min_size, texts)
        return self._with_claims(key, points, texts)

    def _points(
        self, key: GroupKey, query_unit: np.ndarray, threshold: float | None, top_m: int | None, texts: TextsOf | None
    ) -> list[Any]:
        """The cluster's points nearest ``query_unit`` (above ``threshold``, at most ``top_m``), paged."""
        c = self.collection
        payload = [c.claim_key, "_node_content", "text"] if texts is not None else [c.claim_key]
        points: list[Any] = []
        offset = 0
        while True:
            limit = _PAGE if top_m is None else min(_PAGE, top_m - len(points))
            page = c.client.query_points(
                c.name,
                query=query_unit.tolist(),
                using=c.using,
                query_filter=c.cluster_filter(key, self.exclude),
                score_threshold=threshold,
                limit=limit,
                offset=offset,
                with_vectors=True,
                with_payload=payload,
            ).points
            points += page
            offset += len(page)
            if len(page) < limit or (top_m is not None and len(points) >= top_m):
                break
        return points

    def members(self, key: GroupKey, texts: TextsOf | None) -> ClusterMembers:
        """All members of a cluster (scrolls it; for drawing, not for queries)."""
        c = self.collection
        points = [
            p
            for page in c.scroll(
                with_vectors=True,
                payload=[c.claim_key, "_node_content", "text"],
                scroll_filter=c.cluster_filter(key, self.exclude),
            )
            for p in page
        ]
        return self._with_claims(key, points, texts)

    def _with_claims(self, key: GroupKey, points: list[Any], texts: TextsOf | None) -> ClusterMembers:
        """``points`` (evidence) followed by the cluster's claims, as members."""
        claims = self.claims.clusters.group(key)
        vectors = [l2_normalize(np.vstack([self.collection.vector(p) for p in points]))] if points else []
        ids = [str(p.id) for p in points]
        claim_of = [
            payload_str((p.payload or {}).get(self.collection.claim_key)) if self.supervised else None for p in points
        ]
        text_list = [_payload_text(p.payload or {}) for p in points] if texts is not None else None
        live = None
        if claims is not None:
            ids += claims.ids
            vectors.append(claims.unit)
            claim_of += claims.claim_of
            if text_list is not None:
                text_list += list(texts(claims.ids))  # type: ignore[misc]
            if claims.live is not None:  # claims a delete marked dead stay rows, flagged
                live = np.concatenate([np.ones(len(points), dtype=bool), claims.live])
        unit = np.vstack(vectors) if vectors else np.zeros((0, self.dim), np.float32)
        is_claim = np.array([False] * len(points) + [True] * (len(ids) - len(points)), dtype=bool)
        return ClusterMembers(ids, text_list, unit, is_claim, claim_of, live)

    def cluster_size(self, key: GroupKey, claim_id: str | None, core: SOICore) -> int:
        claims = self.claims.clusters.group(key)
        other_claims = 0
        if claims is not None:
            other_claims = sum(1 for r in claims.live_rows().tolist() if claims.claim_of[r] != claim_id)
        return self.counts.get(key, 0) + (other_claims if self.supervised else 0)

    def iter_items(self) -> Iterator[tuple[str, GroupKey]]:
        """Every item with its ``(theme, cluster)`` (scrolls the collection's payloads)."""
        yield from self._point_items()
        yield from self.claims.iter_items()

    def _point_items(self) -> Iterator[tuple[str, GroupKey]]:
        for page in self.collection.scroll(
            with_vectors=False, payload=[CLUSTER_PAYLOAD_KEY, self.collection.theme_key]
        ):
            for p in page:
                payload = p.payload or {}
                if CLUSTER_PAYLOAD_KEY in payload and str(p.id) not in self.claims:
                    yield str(p.id), (self._theme(payload), int(payload[CLUSTER_PAYLOAD_KEY]))

    def evidence_units(self) -> tuple[list[str], np.ndarray]:
        return [], np.zeros((0, self.dim), np.float32)  # the evidence vectors stay on the server

    def evidence_blocks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        return iter(())  # the evidence vectors stay on the server

    def _theme(self, payload: Mapping[str, Any]) -> str | None:
        return payload_str(payload.get(self.collection.theme_key)) if self.supervised else None

    # ---------------------------------------------------------------- writing
    def add(self, groups: Mapping[GroupKey, ClusterGroup], themes: Mapping[str, str]) -> list[tuple[str, str | None]]:
        """Write the clusters of points already in the collection into their payloads; claims stay in memory."""
        claim_groups: dict[GroupKey, ClusterGroup] = {}
        for key, group in groups.items():
            evidence = [i for i, c in zip(group.ids, group.is_claim) if not c]
            for node_id in evidence:
                payload: dict[str, Any] = {CLUSTER_PAYLOAD_KEY: int(key[1])}
                if node_id in themes:
                    payload[self.collection.theme_key] = themes[node_id]  # the SOI query filters on it
                self.collection.set_payload(payload, [node_id])
            self.counts[key] = self.counts.get(key, 0) + len(evidence)
            if group.is_claim.any():
                claim_groups[key] = group.copy_without({p for p, c in enumerate(group.is_claim) if not c})
        return self.claims.add(claim_groups, themes) if claim_groups else []

    def remove(self, node_ids: Sequence[str]) -> tuple[int, list[tuple[str, str | None]]]:
        """Claims leave memory; points deleted from the collection leave every SOI by themselves (counts re-read)."""
        removed, claims = self.claims.remove([i for i in node_ids if i in self.claims])
        before = sum(self.counts.values())
        counts: dict[GroupKey, int] = {}
        for _, key in self._point_items():
            counts[key] = counts.get(key, 0) + 1
        self.counts = counts
        return removed + ((before - sum(counts.values())) if node_ids else 0), claims

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, Any]:
        return {
            **self.claims.get_state(),  # claims only; evidence clusters live in the payloads
            "backend": "qdrant",
            "collection": self.collection.name,
            "counts": [[k[0], k[1], v] for k, v in self.counts.items()],
            "theme_key": self.collection.theme_key,
            "claim_key": self.collection.claim_key,
            "claims_in_collection": list(self.exclude),
        }

    @classmethod
    def from_state(cls, info: Mapping[str, Any], vector_store: Any, dim: int, unit_vectors: Any) -> QdrantClusterStore:
        """Rebuild from :meth:`get_state` against the (same) collection; ``unit_vectors(ids)``: the claims'."""
        if info.get("collection") != vector_store.collection_name:
            raise ValueError(
                f"The state was fitted on collection {info.get('collection')!r}, not {vector_store.collection_name!r}."
            )
        collection = QdrantCollection(vector_store, info.get("theme_key", "theme"), info.get("claim_key", "claim_id"))
        return cls(
            collection,
            supervised=info["mode"] == "supervised",
            dim=dim,
            claims=MemoryClusterStore.from_state(info, dim, unit_vectors),
            counts={(t, int(c)): int(n) for t, c, n in info.get("counts", [])},
            exclude=list(info.get("claims_in_collection", [])),
        )


def payload_str(value: Any) -> str | None:
    """A payload value as a string, ``None`` for a missing or empty one."""
    return None if value is None or str(value) == "" else str(value)


def _payload_text(payload: Mapping[str, Any]) -> str:
    if "text" in payload and payload["text"]:
        return str(payload["text"])
    content = payload.get("_node_content")
    if content:
        try:
            return str(json.loads(content).get("text", ""))
        except (ValueError, AttributeError):
            return ""
    return ""
