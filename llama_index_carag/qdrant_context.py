"""CARAG on a Qdrant collection: clusters in the payload, SOIs built on the server.

:class:`QdrantThematicContext` is the :class:`~llama_index_carag.context.ThematicContext`
for a ``QdrantVectorStore``.  The client never holds the corpus embeddings:

* **fit** counts the points, fetches only the random sample the mixture is fitted
  on (at most ``max_fit_samples`` vectors, in the same canonical order as the
  in-memory context, so both give the same clusters), then scrolls the collection
  in batches, predicts each point's cluster and writes it into the point's
  payload (``carag_cluster``);
* **an SOI** is one filtered vector query: points of the claim's cluster (and, for
  CARAG, theme) whose cosine similarity to the claim is above ``delta``; only those
  points' vectors come back, to average into ``T``.

The claims (few) stay in memory, as in the in-memory context.  Point ids must be
UUIDs (Qdrant's rule); the loaders' ``uuid_ids=True`` gives stable ones.

Works against Qdrant's embedded local mode (``QdrantClient(path=...)`` or
``":memory:"``) and a Qdrant server/cluster alike (``QdrantClient(url=...)``).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from llama_index_carag.clustering import ThematicClusterer
from llama_index_carag.cluster_store import ClusterGroup, MemoryClusters
from llama_index_carag.context import CorpusItems, GroupKey, ThematicContext
from llama_index_carag.soi import ClusterMembers, SOICore
from llama_index_carag.vectors import l2_normalize

logger = logging.getLogger(__name__)

__all__ = ["QdrantThematicContext", "CLUSTER_PAYLOAD_KEY", "is_qdrant_store"]

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


class QdrantThematicContext(ThematicContext):
    """A fitted thematic context whose evidence lives in a Qdrant collection.

    Args:
        vector_store: the index's ``QdrantVectorStore``.
        theme_key, claim_key: payload keys of the theme and the claim link (CARAG).
        Other arguments as for :class:`ThematicContext`.
    """

    def __init__(
        self,
        mode: str = "unsupervised",
        *,
        vector_store: Any,
        theme_key: str = "theme",
        claim_key: str = "claim_id",
        **kwargs: Any,
    ) -> None:
        super().__init__(mode, **kwargs)  # type: ignore[arg-type]
        self.vector_store = vector_store
        self.theme_key = theme_key
        self.claim_key = claim_key

    # ------------------------------------------------------------- plumbing
    @property
    def _client(self) -> Any:
        return self.vector_store.client

    @property
    def _collection(self) -> str:
        return self.vector_store.collection_name

    @property
    def _using(self) -> str | None:
        return self.vector_store.dense_vector_name or None

    def _vector(self, point: Any) -> np.ndarray:
        vector = point.vector
        if isinstance(vector, dict):
            vector = vector[self._using or ""]
        return np.asarray(vector, dtype=np.float32)

    def _scroll(self, *, with_vectors: bool, payload: list[str] | bool) -> Iterator[list[Any]]:
        offset = None
        while True:
            points, offset = self._client.scroll(
                self._collection, limit=_PAGE, offset=offset, with_vectors=with_vectors, with_payload=payload
            )
            if points:
                yield points
            if offset is None:
                return

    def _filter(self, key: GroupKey, extra: list[Any] | None = None) -> Any:
        from qdrant_client import models

        must = [models.FieldCondition(key=CLUSTER_PAYLOAD_KEY, match=models.MatchValue(value=int(key[1])))]
        if key[0] is not None:
            must.append(models.FieldCondition(key=self.theme_key, match=models.MatchValue(value=key[0])))
        claims = getattr(self, "claims_in_collection_", None)
        must_not = [models.HasIdCondition(has_id=list(claims))] if claims else None
        return models.Filter(must=must + (extra or []), must_not=must_not)

    # -------------------------------------------------------------- fitting
    def fit_store(self, claims: CorpusItems, *, show_progress: bool = False) -> "QdrantThematicContext":
        """Cluster the collection's points plus ``claims`` and write the clusters into the payloads."""
        claims.validate()
        wanted = [self.theme_key, self.claim_key] if self.mode == "supervised" else False
        ids: list[str] = []
        themes: list[str | None] = []
        claim_of: list[str | None] = []
        for page in self._scroll(with_vectors=False, payload=wanted):
            for point in page:
                ids.append(str(point.id))
                pl = point.payload or {}
                themes.append(_str(pl.get(self.theme_key)) if self.mode == "supervised" else None)
                claim_of.append(_str(pl.get(self.claim_key)) if self.mode == "supervised" else None)
        claim_set = set(claims.ids)
        self.claims_in_collection_ = sorted(i for i in ids if i in claim_set)
        if self.claims_in_collection_:  # claims stored as points are claims, never evidence
            keep = [k for k, i in enumerate(ids) if i not in claim_set]
            ids, themes, claim_of = [ids[k] for k in keep], [themes[k] for k in keep], [claim_of[k] for k in keep]
        if not ids:
            raise ValueError("The Qdrant collection is empty: add evidence nodes before fitting CARAG.")
        probe = self._client.retrieve(self._collection, ids=[ids[0]], with_vectors=True, with_payload=False)
        self.dim_ = int(self._vector(probe[0]).shape[0])
        claim_vectors = np.asarray(claims.vectors, dtype=np.float32)
        claim_vectors = claim_vectors.reshape(len(claims.ids), claim_vectors.shape[-1] if claim_vectors.size else self.dim_)
        if claim_vectors.shape[0] and claim_vectors.shape[1] != self.dim_:
            raise ValueError(
                f"Claim embeddings have dimension {claim_vectors.shape[1]} but the collection's have {self.dim_}."
            )
        self._claim_texts = dict(claims.claim_texts or {})
        self._claim_node_of = {str(c): i for i, c in zip(claims.ids, claims.claim_of)}
        self._counts: dict[GroupKey, int] = {}
        self.clusterers_ = {}
        self.theme_centroids_ = {}
        claim_themes = list(claims.themes) if claims.themes is not None else [None] * len(claims.ids)
        if self.mode == "supervised":
            missing = [i for i, t in zip(ids + list(claims.ids), themes + claim_themes) if not t]
            if missing:
                raise ValueError(
                    f"Supervised CARAG needs a theme on every node; {len(missing)} node(s) lack it (e.g. {missing[0]!r})."
                )
            partitions = sorted(set(themes) | set(claim_themes))
        else:
            partitions = [None]
        for theme in partitions:
            ev = [i for i, t in enumerate(themes) if t == theme] if theme is not None else list(range(len(ids)))
            cl = [i for i, t in enumerate(claim_themes) if t == theme] if theme is not None else list(range(len(claims.ids)))
            self._fit_partition(theme, [ids[i] for i in ev], [claims.ids[i] for i in cl], claim_vectors[cl], show_progress)
        self._assign_all(ids, themes, show_progress)
        groups: dict[GroupKey, ClusterGroup] = {}  # the claims stay in memory
        for i, (cid, theme) in enumerate(zip(claims.ids, claim_themes)):
            part = theme if self.mode == "supervised" else None
            key = (part, int(self.clusterers_[part].predict(claim_vectors[i : i + 1])[0]))
            one = ClusterGroup([cid], l2_normalize(claim_vectors[i : i + 1]), np.array([True]), [claims.claim_of[i]])
            groups[key] = one if key not in groups else groups[key].extended(one)
        self._publish(MemoryClusters(groups, self.dim_))
        self.n_items_ = len(ids) + len(claims.ids)
        self._evidence_count = len(ids)
        logger.info("Fitted %s context on Qdrant collection %r: %d points", self.mode, self._collection, len(ids))
        return self

    def _fit_partition(
        self, theme: str | None, evidence_ids: list[str], claim_ids: Sequence[str], claim_vectors: np.ndarray,
        show_progress: bool,
    ) -> None:
        all_ids = list(evidence_ids) + list(claim_ids)
        n = len(all_ids)
        k: int | str = self.n_clusters
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k > n:
            if theme is None:
                raise ValueError(f"n_clusters={k} is larger than the number of nodes to cluster ({n}).")
            k = n
        clusterer = ThematicClusterer(
            n_clusters=k, random_state=self.random_state, normalize=True, show_progress=show_progress,  # type: ignore[arg-type]
            **self.clusterer_params,
        )
        canonical = np.argsort(np.asarray(all_ids, dtype=object), kind="stable")
        positions = clusterer.sample_positions(n)
        rows = canonical if positions is None else canonical[positions]
        sample = self._vectors_of([all_ids[r] for r in rows], evidence=set(evidence_ids), claims=dict(zip(claim_ids, claim_vectors)))
        clusterer.fit(sample)  # already in canonical order, already within the sample size
        self.clusterers_[theme] = clusterer

    def _vectors_of(self, node_ids: list[str], *, evidence: set[str], claims: dict[str, np.ndarray]) -> np.ndarray:
        out = np.empty((len(node_ids), self.dim_), dtype=np.float32)
        remote = [i for i in node_ids if i in evidence]
        fetched: dict[str, np.ndarray] = {}
        for start in range(0, len(remote), _PAGE):
            for point in self._client.retrieve(
                self._collection, ids=remote[start : start + _PAGE], with_vectors=True, with_payload=False
            ):
                fetched[str(point.id)] = self._vector(point)
        for r, node_id in enumerate(node_ids):
            out[r] = fetched[node_id] if node_id in fetched else claims[node_id]
        return out

    def _assign_all(self, ids: list[str], themes: list[str | None], show_progress: bool) -> None:
        """Scroll the collection once: predict clusters, write them into payloads, count, and sum theme centroids."""
        sums: dict[str | None, np.ndarray] = {}
        theme_of = dict(zip(ids, themes))
        for page in self._scroll(with_vectors=True, payload=False):
            pids = [str(p.id) for p in page]
            unit = l2_normalize(np.vstack([self._vector(p) for p in page]))
            page_themes = [theme_of.get(i) for i in pids]
            for theme in set(page_themes):
                rows = [r for r, t in enumerate(page_themes) if t == theme]
                labels = self.clusterers_[theme].predict(unit[rows])
                for label in set(labels.tolist()):
                    members = [pids[rows[j]] for j in np.flatnonzero(labels == label)]
                    self._client.set_payload(self._collection, payload={CLUSTER_PAYLOAD_KEY: int(label)}, points=members)
                    key = (theme, int(label))
                    self._counts[key] = self._counts.get(key, 0) + len(members)
                sums[theme] = sums.get(theme, 0) + unit[rows].sum(axis=0, dtype=np.float64)
        if self.mode == "supervised":
            self.theme_centroids_ = {t: l2_normalize(np.asarray(v, dtype=np.float32)) for t, v in sums.items()}

    # -------------------------------------------------------------- queries
    @property
    def groups(self) -> list[GroupKey]:
        return sorted(set(self._counts) | set(self.clusters.keys()), key=lambda k: (str(k[0]), k[1]))

    def group_size(self, key: GroupKey) -> int:
        return self._counts.get(key, 0) + self.clusters.size(key)

    def _query_members(
        self, key: GroupKey, query_unit: np.ndarray, delta: float, top_m: int | None, include_texts: bool
    ) -> ClusterMembers:
        q = query_unit  # checked and normalised once, by query_soi
        payload = [self.claim_key, "_node_content", "text"] if include_texts else [self.claim_key]
        points: list[Any] = []
        offset = 0
        if self.mode == "supervised":
            top_m = None  # the cap applies after the claim-link filter, in supervised_core
        while True:
            limit = _PAGE if top_m is None else min(_PAGE, top_m - len(points))
            page = self._client.query_points(
                self._collection, query=q.tolist(), using=self._using, query_filter=self._filter(key),
                score_threshold=float(delta), limit=limit, offset=offset, with_vectors=True, with_payload=payload,
            ).points
            points += page
            offset += len(page)
            if len(page) < limit or (top_m is not None and len(points) >= top_m):
                break
        claims = self.clusters.group(key)
        ids = [str(p.id) for p in points]
        unit = l2_normalize(np.vstack([self._vector(p) for p in points])) if points else np.zeros((0, self.dim_), np.float32)
        claim_of: list[str | None] = [
            _str((p.payload or {}).get(self.claim_key)) if self.mode == "supervised" else None for p in points
        ]
        texts: list[str] | None = [_payload_text(p.payload or {}) for p in points] if include_texts else None
        if claims is not None:
            ids += claims.ids
            unit = np.vstack([unit, claims.unit])
            claim_of += claims.claim_of
            if texts is not None:
                texts += [self._claim_texts.get(i, "") for i in claims.ids]
        is_claim = np.array([False] * len(points) + [True] * (len(ids) - len(points)), dtype=bool)
        return ClusterMembers(ids, texts, unit, is_claim, claim_of)

    def _cluster_size(self, key: GroupKey, claim_id: str | None, core: SOICore) -> int:
        claims = self.clusters.group(key)
        other_claims = sum(1 for c in claims.claim_of if c != claim_id) if claims is not None else 0
        return self._counts.get(key, 0) + (other_claims if self.mode == "supervised" else 0)

    def _fetch(self, node_ids: Sequence[str]) -> dict[str, Any]:
        local = {i for i in node_ids if i in self.clusters}
        remote = [i for i in node_ids if i not in local]
        points = self._client.retrieve(self._collection, ids=remote, with_vectors=True, with_payload=[CLUSTER_PAYLOAD_KEY]) if remote else []
        return {str(p.id): p for p in points}

    def vectors_and_clusters(self, node_ids: Sequence[str]) -> tuple[list[np.ndarray | None], list[int | None]]:
        """Unit vectors and clusters of several nodes with one round trip."""
        points = self._fetch(node_ids)
        return self.unit_vectors(node_ids, points), self.clusters_of(node_ids, points)

    def unit_vectors(self, node_ids: Sequence[str], points: dict[str, Any] | None = None) -> list[np.ndarray | None]:
        points = self._fetch(node_ids) if points is None else points
        out: list[np.ndarray | None] = []
        for i in node_ids:
            if i in self.clusters:
                out.append(super().unit_vector(i))
            elif i in points:
                out.append(l2_normalize(self._vector(points[i])))
            else:
                out.append(None)
        return out

    def clusters_of(self, node_ids: Sequence[str], points: dict[str, Any] | None = None) -> list[int | None]:
        points = self._fetch(node_ids) if points is None else points
        out: list[int | None] = []
        for i in node_ids:
            if i in self.clusters:
                out.append(super().cluster_of(i))
            elif i in points and CLUSTER_PAYLOAD_KEY in (points[i].payload or {}):
                out.append(int(points[i].payload[CLUSTER_PAYLOAD_KEY]))
            else:
                out.append(None)
        return out

    def unit_vector(self, node_id: str) -> np.ndarray | None:
        return self.unit_vectors([node_id])[0]

    def cluster_of(self, node_id: str) -> int | None:
        return self.clusters_of([node_id])[0]

    def members(self, key: GroupKey, *, include_texts: bool = True) -> ClusterMembers:
        """All members of a cluster (scrolls it; for drawing, not for queries)."""
        points: list[Any] = []
        offset = None
        while True:
            page, offset = self._client.scroll(
                self._collection, scroll_filter=self._filter(key), limit=_PAGE, offset=offset, with_vectors=True,
                with_payload=[self.claim_key, "_node_content", "text"],
            )
            points += page
            if offset is None:
                break
        zero = np.zeros(self.dim_, dtype=np.float32)
        return self._merge_claims(key, points, include_texts, zero)

    def _merge_claims(self, key: GroupKey, points: list[Any], include_texts: bool, zero: np.ndarray) -> ClusterMembers:
        claims = self.clusters.group(key)
        ids = [str(p.id) for p in points] + (claims.ids if claims else [])
        unit = np.vstack([l2_normalize(self._vector(p)) for p in points] + ([claims.unit] if claims else []) or [zero[None, :0]])
        is_claim = np.array([False] * len(points) + [True] * (len(claims) if claims else 0), dtype=bool)
        claim_of = [_str((p.payload or {}).get(self.claim_key)) if self.mode == "supervised" else None for p in points]
        claim_of += claims.claim_of if claims else []
        texts = None
        if include_texts:
            texts = [_payload_text(p.payload or {}) for p in points] + [self._claim_texts.get(i, "") for i in (claims.ids if claims else [])]
        return ClusterMembers(ids, texts, unit.reshape(len(ids), self.dim_), is_claim, claim_of)

    def iter_items(self) -> Iterable[tuple[str, GroupKey]]:
        """Every item with its ``(theme, cluster)`` (scrolls the collection's payloads)."""
        for page in self._scroll(with_vectors=False, payload=[CLUSTER_PAYLOAD_KEY, self.theme_key]):
            for p in page:
                pl = p.payload or {}
                if CLUSTER_PAYLOAD_KEY in pl:
                    theme = _str(pl.get(self.theme_key)) if self.mode == "supervised" else None
                    yield str(p.id), (theme, int(pl[CLUSTER_PAYLOAD_KEY]))
        yield from super().iter_items()

    def __contains__(self, node_id: object) -> bool:
        if super().__contains__(node_id):
            return True
        return bool(self._client.retrieve(self._collection, ids=[str(node_id)], with_payload=False, with_vectors=False))

    # ---------------------------------------------------- incremental updates
    def add_items(self, items: CorpusItems) -> list[GroupKey]:
        """Assign clusters to points already added to the collection (payload update, no refit)."""
        self._check_fitted()
        items.validate()
        evidence = [i for i, c in enumerate(items.is_claim) if not c]
        unit = l2_normalize(np.asarray(items.vectors, dtype=np.float32).reshape(len(items.ids), -1))
        keys: list[GroupKey] = []
        themes = list(items.themes) if items.themes is not None else [None] * len(items.ids)
        for i in evidence:
            theme = themes[i] if self.mode == "supervised" else None
            payload: dict[str, Any] = {}
            if self.mode == "supervised" and theme not in self.clusterers_:
                theme = self.nearest_theme(unit[i])
                payload[self.theme_key] = theme  # the SOI query filters on it
            label = int(self.clusterers_[theme].predict(unit[i : i + 1])[0])
            payload[CLUSTER_PAYLOAD_KEY] = label
            self._client.set_payload(self._collection, payload=payload, points=[items.ids[i]])
            self._counts[(theme, label)] = self._counts.get((theme, label), 0) + 1
            keys.append((theme, label))
        self._evidence_count += len(evidence)
        self.n_items_ += len(evidence)
        return keys

    def remove_items(self, ids: Iterable[str]) -> int:
        """Points deleted from the collection leave every SOI by themselves; only local counts change."""
        ids = list(ids)
        removed = super().remove_items([i for i in ids if i in self.clusters])
        gone = [i for i in ids if i not in self.clusters]
        self._counts = {}
        for _, key in ((i, k) for i, k in self.iter_items() if i not in self.clusters):
            self._counts[key] = self._counts.get(key, 0) + 1
        total = sum(self._counts.values())
        delta = self._evidence_count - total
        self._evidence_count = total
        self.n_items_ -= delta
        return removed + (delta if gone else 0)

    # --------------------------------------------------------------- state
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        info, arrays = super().get_state()  # claims only; evidence clusters live in the payloads
        info["backend"] = "qdrant"
        info["collection"] = self._collection
        info["counts"] = [[k[0], k[1], v] for k, v in self._counts.items()]
        info["theme_key"] = self.theme_key
        info["claim_key"] = self.claim_key
        info["claims_in_collection"] = list(getattr(self, "claims_in_collection_", []))
        return info, arrays

    @classmethod
    def from_store_state(
        cls, info: dict[str, Any], arrays: dict[str, np.ndarray], vector_store: Any, claim_vectors: Any
    ) -> "QdrantThematicContext":
        """Rebuild from :meth:`get_state` against the (same) Qdrant collection."""
        if info.get("collection") != vector_store.collection_name:
            raise ValueError(
                f"The state was fitted on collection {info.get('collection')!r}, not {vector_store.collection_name!r}."
            )
        base = ThematicContext.from_state(info, arrays, claim_vectors)
        ctx = cls(
            info["mode"], vector_store=vector_store, theme_key=info.get("theme_key", "theme"),
            claim_key=info.get("claim_key", "claim_id"), n_clusters=info["n_clusters"],
            random_state=info["random_state"], clusterer_params=info.get("clusterer_params") or {},
        )
        for name, value in base.__dict__.items():
            if name not in ("vector_store", "theme_key", "claim_key", "_lock"):
                setattr(ctx, name, value)
        ctx._counts = {(t, int(c)): int(n) for t, c, n in info.get("counts", [])}
        ctx.claims_in_collection_ = list(info.get("claims_in_collection", []))
        ctx._evidence_count = sum(ctx._counts.values())
        ctx.n_items_ = ctx._evidence_count + len(ctx.clusters)
        return ctx


def _str(value: Any) -> str | None:
    return None if value is None or str(value) == "" else str(value)


def _payload_text(payload: dict[str, Any]) -> str:
    if "text" in payload and payload["text"]:
        return str(payload["text"])
    content = payload.get("_node_content")
    if content:
        import json

        try:
            return str(json.loads(content).get("text", ""))
        except (ValueError, AttributeError):
            return ""
    return ""
