"""The fitted thematic context of a corpus: clusters, their members, and SOIs.

:class:`ThematicContext` is what CARAG learns once, at fit time, and reads at
query time:

* the unit embeddings of every evidence passage and claim, stored **per
  cluster** (contiguous arrays, so building an SOI touches one cluster and
  copies nothing);
* the fitted :class:`~llama_index_carag.clustering.ThematicClusterer` — one for
  the whole corpus (CARAG-u) or one per theme (CARAG);
* which claim each evidence passage is annotated for, and each item's theme.

``build_soi(query_vector, …)`` then locates the query's cluster (its own cluster
when the query is a corpus claim, else the clusterer's prediction; for CARAG
first its theme, else the nearest theme centroid) and calls the mode's SOI
builder from :mod:`llama_index_carag.soi`.  Nothing is re-embedded per query.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

import numpy as np

from llama_index_carag.cluster_store import ClusterGroup, GroupKey, LazyTexts, MemoryClusters
from llama_index_carag.clustering import ThematicClusterer, clusterers_from_state, clusterers_state
from llama_index_carag.corpus_items import CorpusItems, SOIQuery, normalize_claim_text
from llama_index_carag.soi import (
    ClusterMembers,
    SOICore,
    SubsetOfInterest,
    materialize_soi,
    supervised_core,
    unsupervised_core,
)
from llama_index_carag.vectors import as_matrix, as_vector, l2_normalize

logger = logging.getLogger(__name__)

__all__ = ["CorpusItems", "ThematicContext", "MODES", "normalize_claim_text", "GroupKey"]

MODES = ("unsupervised", "supervised")
Mode = Literal["unsupervised", "supervised"]


def _progress(iterable: Any, total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="theme" if total > 1 else "step")


class ThematicContext:
    """Fitted clusters of a corpus and the SOI builder over them.

    Args:
        mode: ``"unsupervised"`` (CARAG-u: one clustering of all claims and
            evidence, no labels) or ``"supervised"`` (CARAG: one clustering per
            theme, annotations used for the SOI).
        n_clusters: clusters ``t`` (per theme in supervised mode, capped at the
            theme's size), or ``"auto"`` for BIC.
        random_state: seed of the clustering.
        clusterer_params: extra :class:`ThematicClusterer` arguments
            (``covariance_type``, ``reduce_dim``, ``max_fit_samples``, …).
        text_lookup: node id → text, used to fill SOI item texts lazily.

    Attributes (after :meth:`fit`):
        clusterers_: ``{theme or None: ThematicClusterer}``.
        theme_centroids_: ``{theme: unit centroid}`` (supervised only).
        dim_: embedding dimension.
        n_items_: number of clustered items.
    """

    def __init__(
        self,
        mode: Mode = "unsupervised",
        *,
        n_clusters: int | Literal["auto"] = 10,
        random_state: int | None = 0,
        clusterer_params: Mapping[str, Any] | None = None,
        text_lookup: Callable[[str], str] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be 'unsupervised' or 'supervised'; got {mode!r}.")
        self.mode = mode
        self._lock = threading.RLock()
        self.n_clusters = n_clusters
        self.random_state = random_state
        self.clusterer_params = dict(clusterer_params or {})
        self.text_lookup = text_lookup

    # ----------------------------------------------------------------- fitting
    def fit(self, items: CorpusItems, *, show_progress: bool = False) -> "ThematicContext":
        """Cluster ``items`` and store their members per cluster.

        Raises:
            ValueError: empty corpus, NaN vectors, duplicated ids, too many
                clusters, or (supervised) items without a theme.
        """
        items.validate()
        if len(items.ids) == 0:
            raise ValueError("Cannot fit CARAG on an empty corpus (no evidence nodes).")
        X = as_matrix(items.vectors, name="corpus embeddings")  # no copy for float32 input
        norms = np.linalg.norm(X, axis=1)
        zero = np.flatnonzero(norms == 0)
        if zero.size:
            raise ValueError(f"Node {items.ids[int(zero[0])]!r} has an all-zero embedding.")
        self.dim_ = int(X.shape[1])
        self.n_items_ = int(X.shape[0])
        ids = list(items.ids)
        is_claim = np.asarray(items.is_claim, dtype=bool)
        claim_of = list(items.claim_of)
        self._claim_texts = dict(items.claim_texts or {})
        self._claim_node_of = {str(claim_of[i]): ids[i] for i in np.flatnonzero(is_claim)}

        partitions = self._partitions(items, ids)
        labels, theme_index = self._cluster(X, ids, partitions, show_progress)
        self._store_sorted(X, norms, ids, is_claim, claim_of, labels, theme_index, list(partitions))
        logger.info("Fitted %s context: %d items, %d clusters", self.mode, self.n_items_, len(self._clusters.groups))
        return self

    def _partitions(self, items: CorpusItems, ids: list[str]) -> dict[str | None, np.ndarray]:
        """Rows clustered together: one theme each (supervised), or all (unsupervised)."""
        if self.mode == "supervised":
            themes = list(items.themes) if items.themes is not None else [None] * len(ids)
            missing = [i for i, t in enumerate(themes) if t is None or str(t) == ""]
            if missing:
                raise ValueError(
                    f"Supervised CARAG needs a theme on every node; {len(missing)} node(s) lack it "
                    f"(e.g. {ids[missing[0]]!r}). Set the theme metadata key or use mode='unsupervised'."
                )
            theme_arr = np.asarray(themes, dtype=object)
            partitions = {t: np.flatnonzero(theme_arr == t) for t in sorted(set(themes))}
        else:
            partitions = {None: np.arange(len(ids))}
        if isinstance(self.n_clusters, (int, np.integer)) and not isinstance(self.n_clusters, bool):
            if self.n_clusters > len(ids):
                raise ValueError(
                    f"n_clusters={self.n_clusters} is larger than the number of nodes to cluster ({len(ids)})."
                )
        return partitions

    def _cluster(
        self, X: np.ndarray, ids: list[str], partitions: dict[str | None, np.ndarray], show_progress: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fit one mixture per partition; ``(labels, partition index)`` of every row."""
        self.clusterers_: dict[str | None, ThematicClusterer] = {}
        self.theme_centroids_: dict[str, np.ndarray] = {}
        labels = np.empty(len(ids), dtype=np.int64)
        theme_index = np.empty(len(ids), dtype=np.int64)
        for t_i, (theme, rows) in enumerate(_progress(partitions.items(), len(partitions), "Clustering", show_progress)):
            k: int | str = self.n_clusters
            if isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k > len(rows):
                logger.warning(
                    "Theme %r has only %d nodes; using %d clusters instead of %d.", theme, len(rows), len(rows), k
                )
                k = len(rows)
            clusterer = ThematicClusterer(
                n_clusters=k,  # type: ignore[arg-type]
                random_state=self.random_state,
                normalize=True,
                show_progress=show_progress,
                **self.clusterer_params,
            )
            part = X if len(rows) == len(ids) else X[rows]
            # Canonical order (by node id): the same corpus gives the same clusters in any storage order.
            canonical = np.argsort(np.asarray([ids[r] for r in rows], dtype=object), kind="stable")
            labels[rows] = clusterer.fit(part, order=canonical).labels_
            del part
            theme_index[rows] = t_i
            self.clusterers_[theme] = clusterer
        return labels, theme_index

    def _store_sorted(
        self, X: np.ndarray, norms: np.ndarray, ids: list[str], is_claim: np.ndarray, claim_of: list[str | None],
        labels: np.ndarray, theme_index: np.ndarray, theme_names: list[str | None],
    ) -> None:
        """One sorted, normalised copy of the corpus; every cluster is a contiguous view of it."""
        order = np.lexsort((is_claim, labels, theme_index))
        unit = X[order]
        unit /= norms[order, None].astype(np.float32)
        groups: dict[GroupKey, ClusterGroup] = {}
        keys = theme_index[order] * (int(labels.max()) + 1) + labels[order]
        bounds = [0, *(np.flatnonzero(np.diff(keys)) + 1).tolist(), len(order)]
        for start, stop in zip(bounds[:-1], bounds[1:]):
            rows = order[start:stop]
            key: GroupKey = (theme_names[int(theme_index[rows[0]])], int(labels[rows[0]]))
            groups[key] = ClusterGroup([ids[r] for r in rows], unit[start:stop], is_claim[rows], [claim_of[r] for r in rows])
        for theme in theme_names:
            if theme is not None:
                members = [g.unit for (t, _), g in groups.items() if t == theme]
                total = sum(m.sum(axis=0, dtype=np.float64) for m in members)
                self.theme_centroids_[theme] = l2_normalize(np.asarray(total, dtype=np.float32))
        self._publish(MemoryClusters(groups, self.dim_))

    # A fitted context's members live in one immutable MemoryClusters snapshot.  Writers
    # (add/remove) build a new one under the lock and publish it with one assignment, so a
    # concurrent query always reads a consistent view.
    @property
    def lock(self) -> "threading.RLock":
        """The writers' lock (add/remove/sync hold it)."""
        return self._lock

    @property
    def clusters(self) -> MemoryClusters:
        """The members held in memory (all items; for Qdrant, the claims)."""
        return self._clusters

    def _publish(self, clusters: MemoryClusters) -> None:
        self._clusters = clusters
        names = list(self.theme_centroids_) if getattr(self, "theme_centroids_", None) else []
        self._centroid_names = names
        self._centroid_matrix = np.vstack([self.theme_centroids_[t] for t in names]) if names else None

    # ------------------------------------------------------ incremental updates
    def add_items(self, items: CorpusItems) -> list[GroupKey]:
        """Add new nodes without refitting: each gets its cluster from the fitted mixture.

        In supervised mode a node without a theme gets the nearest theme centroid's.
        Ids already in the context are replaced (never duplicated).

        Returns:
            the ``(theme, cluster)`` of each added item.
        """
        self._check_fitted()
        items.validate()
        if not len(items.ids):
            return []
        X = as_matrix(items.vectors, name="new embeddings")
        if X.shape[1] != self.dim_:
            raise ValueError(f"New embeddings have dimension {X.shape[1]}; the context has {self.dim_}.")
        unit = l2_normalize(X)
        if not np.all(np.linalg.norm(unit, axis=1) > 0):
            raise ValueError("A new node has an all-zero embedding.")
        with self._lock:
            return self._add_locked(items, unit)

    def _add_locked(self, items: CorpusItems, unit: np.ndarray) -> list[GroupKey]:
        self.remove_items([i for i in items.ids if i in self._clusters])
        themes = list(items.themes) if items.themes is not None else [None] * len(items.ids)
        keys: list[GroupKey] = []
        for i in range(len(items.ids)):
            theme = themes[i] if self.mode == "supervised" else None
            if self.mode == "supervised" and (theme is None or theme not in self.clusterers_):
                theme = self.nearest_theme(unit[i])
            keys.append((theme, -1))
        for theme in {k[0] for k in keys}:
            rows = [i for i, k in enumerate(keys) if k[0] == theme]
            for i, label in zip(rows, self.clusterers_[theme].predict(unit[rows])):
                keys[i] = (theme, int(label))
        claim_of = list(items.claim_of)
        added: dict[GroupKey, ClusterGroup] = {}
        for key in dict.fromkeys(keys):
            rows = [i for i, k in enumerate(keys) if k == key]
            added[key] = ClusterGroup(
                [items.ids[r] for r in rows], unit[rows], np.asarray(items.is_claim, dtype=bool)[rows],
                [claim_of[r] for r in rows],
            )
        claim_node_of, claim_texts = dict(self._claim_node_of), dict(self._claim_texts)
        for i in np.flatnonzero(np.asarray(items.is_claim, dtype=bool)):
            claim_node_of[str(claim_of[i])] = items.ids[i]
        claim_texts.update(items.claim_texts or {})
        self._claim_node_of, self._claim_texts = claim_node_of, claim_texts
        self._publish(self._clusters.with_added(added))
        self.n_items_ += len(items.ids)
        self._invalidate()
        return keys

    def remove_items(self, ids: Iterable[str]) -> int:
        """Drop nodes from every cluster (and so from every SOI).  Unknown ids are ignored.

        Returns:
            how many were removed.
        """
        self._check_fitted()
        with self._lock:
            before = self._clusters
            after, claims = before.without(ids)
            if after is before:
                return 0
            claim_node_of, claim_texts = dict(self._claim_node_of), dict(self._claim_texts)
            for node_id, claim in claims:
                claim_node_of.pop(str(claim), None)
                claim_texts.pop(node_id, None)
            self._claim_node_of, self._claim_texts = claim_node_of, claim_texts
            self._publish(after)
            removed = len(before) - len(after)
            self.n_items_ -= removed
            self._invalidate()
            return removed

    def _invalidate(self) -> None:
        """Drop caches derived from the members."""
        self.__dict__.pop("_claim_index", None)

    def nearest_theme(self, unit_vector: np.ndarray) -> str:
        """The theme whose centroid is most similar (cosine) to a unit vector (supervised mode)."""
        if self._centroid_matrix is None:
            raise ValueError("This context has no themes.")
        return self._centroid_names[int(np.argmax(self._centroid_matrix @ unit_vector))]

    # ----------------------------------------------------------------- queries
    def _check_fitted(self) -> None:
        if not hasattr(self, "_clusters"):
            raise RuntimeError("ThematicContext is not fitted; call fit() first.")

    @property
    def groups(self) -> list[GroupKey]:
        """``(theme, cluster)`` keys of the non-empty clusters."""
        self._check_fitted()
        return self._clusters.keys()

    def group_size(self, key: GroupKey) -> int:
        return self._clusters.size(key)

    def __contains__(self, node_id: object) -> bool:
        return hasattr(self, "_clusters") and node_id in self._clusters

    @property
    def claim_node_ids(self) -> list[str]:
        """Node ids of the clustered claims."""
        self._check_fitted()
        return list(self._claim_node_of.values())

    def claim_node_of(self) -> dict[str, str]:
        """``{claim id: its node id}`` of the clustered claims (a copy)."""
        self._check_fitted()
        return dict(self._claim_node_of)

    def claim_text(self, node_id: str) -> str:
        """The text of a clustered claim node (empty when unknown)."""
        return self._claim_texts.get(node_id, "")

    def cluster_of(self, node_id: str) -> int | None:
        """Cluster of a corpus node (``None`` for a node not clustered)."""
        key = self._clusters.key_of(node_id)
        return None if key is None else key[1]

    def theme_of(self, node_id: str) -> str | None:
        """Theme group of a corpus node (supervised mode), else ``None``."""
        key = self._clusters.key_of(node_id)
        return None if key is None else key[0]

    def unit_vector(self, node_id: str) -> np.ndarray | None:
        """The stored unit embedding of a corpus node, shape ``(d,)``, or ``None``."""
        return self._clusters.unit_vector(node_id)  # one snapshot: position and group always agree

    def match_claim(self, text: str) -> str | None:
        """Claim id of the corpus claim whose text equals ``text`` (case/space-insensitive), else ``None``."""
        if not hasattr(self, "_claim_index"):
            node_claim = {node: cid for cid, node in self._claim_node_of.items()}
            self._claim_index = {
                normalize_claim_text(t): node_claim[node] for node, t in self._claim_texts.items() if node in node_claim
            }
        return self._claim_index.get(normalize_claim_text(text))

    def locate(self, query_vector: np.ndarray, claim_id: str | None = None, *, unit: bool = False) -> GroupKey:
        """The ``(theme, cluster)`` of a query: a corpus claim's own, else predicted.

        For supervised mode, an unknown claim gets the theme whose centroid is
        closest (cosine) and then that theme's predicted cluster.  ``unit=True``: the
        vector is already a checked unit vector of the context's dimension.
        """
        self._check_fitted()
        node_id = self._claim_node_of.get(claim_id) if claim_id is not None else None
        key = None if node_id is None else self._clusters.key_of(node_id)
        if key is not None:
            return key
        q = query_vector if unit else l2_normalize(as_vector(query_vector, dim=self.dim_))
        if self.mode == "supervised":
            theme: str | None = self.nearest_theme(q)
        else:
            theme = None
        cluster = int(self.clusterers_[theme].predict(q[None, :])[0])
        return (theme, cluster)

    def members(self, key: GroupKey, *, include_texts: bool = True) -> ClusterMembers:
        """The members of cluster ``key`` (views, no copies; texts looked up lazily, or not at all)."""
        self._check_fitted()
        if not include_texts:
            return self._clusters.members(key)
        lookup = self.text_lookup or (lambda node_id: self._claim_texts.get(node_id, ""))
        return self._clusters.members(key, lambda ids: LazyTexts(ids, lambda i: self._claim_texts.get(i) or lookup(i)))

    def build_soi(
        self,
        query_vector: np.ndarray,
        delta: float,
        *,
        claim: str = "",
        claim_id: str | None = None,
        top_m: int | None = None,
        n_related_claims: int = 0,
        include_texts: bool = True,
    ) -> SubsetOfInterest:
        """The SOI of a query vector (shape ``(d,)``) at threshold ``delta`` (at most ``top_m`` items).

        ``claim_id`` marks the query as a corpus claim (found from ``claim`` by
        :meth:`match_claim` when not given).
        """
        q = self.query_soi(
            query_vector, delta, claim=claim, claim_id=claim_id, top_m=top_m,
            n_related_claims=n_related_claims, include_texts=include_texts,
        )
        return materialize_soi(
            q.core, q.members, mode=self.mode, claim=claim, claim_id=q.claim_id, delta=delta,  # type: ignore[arg-type]
            cluster=q.key[1], theme=q.key[0],
        )

    def query_soi(
        self,
        query_vector: np.ndarray,
        delta: float,
        *,
        claim: str = "",
        claim_id: str | None = None,
        top_m: int | None = None,
        n_related_claims: int = 0,
        include_texts: bool = False,
        unit: bool = False,
    ) -> "SOIQuery":
        """Locate the query and compute its SOI as rows (:class:`SOICore`) — retrieval's fast path.

        The query vector is checked and normalised once, here; ``unit=True`` says the caller
        did it already (a finite unit vector of the context's dimension; ``delta`` and
        ``top_m`` validated).
        """
        self._check_fitted()
        q = query_vector if unit else self._unit_query(query_vector, delta, top_m)
        if claim_id is None and claim:
            claim_id = self.match_claim(claim)
        key = self.locate(q, claim_id, unit=True)
        members = self._query_members(key, q, delta, top_m, include_texts)
        if self.mode == "supervised":
            core = supervised_core(q, members, delta, claim_id=claim_id, top_m=top_m, unit=True)
        else:
            core = unsupervised_core(
                q, members, delta, claim_id=claim_id, top_m=top_m, n_related_claims=n_related_claims, unit=True
            )
        size = self._cluster_size(key, claim_id, core)
        if size != core.cluster_size:
            core = dataclasses.replace(core, cluster_size=size)
        return SOIQuery(key, claim_id, members, core)

    def _unit_query(self, query_vector: np.ndarray, delta: float, top_m: int | None) -> np.ndarray:
        from llama_index_carag._validation import check_delta, check_top_k

        check_delta(delta)
        if top_m is not None:
            check_top_k(top_m, "top_m")
        q = as_vector(query_vector, dim=self.dim_, name="claim vector")
        if not np.any(q):
            raise ValueError("The claim vector is all zeros; cosine similarity is undefined.")
        return l2_normalize(q)

    def _cluster_size(self, key: GroupKey, claim_id: str | None, core: SOICore) -> int:
        return core.cluster_size

    def _query_members(
        self, key: GroupKey, query_unit: np.ndarray, delta: float, top_m: int | None, include_texts: bool
    ) -> ClusterMembers:
        """The members an SOI is built from (here: the whole cluster, held in memory)."""
        return self.members(key, include_texts=include_texts)

    def unit_vectors(self, node_ids: Sequence[str]) -> list[np.ndarray | None]:
        """Stored unit embeddings of several nodes (``None`` for unknown ones)."""
        return [self.unit_vector(i) for i in node_ids]

    def clusters_of(self, node_ids: Sequence[str]) -> list[int | None]:
        """Clusters of several nodes (``None`` for unknown ones)."""
        return [self.cluster_of(i) for i in node_ids]

    def vectors_and_clusters(self, node_ids: Sequence[str]) -> tuple[list[np.ndarray | None], list[int | None]]:
        """:meth:`unit_vectors` and :meth:`clusters_of` together (one round trip for remote stores)."""
        return self.unit_vectors(node_ids), self.clusters_of(node_ids)

    # --------------------------------------------------------------- state I/O
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-safe info, arrays) describing the fitted context, without embeddings.

        Embeddings are restored from the vector store (evidence) and from the
        saved claim vectors by :meth:`from_state`.
        """
        self._check_fitted()
        info: dict[str, Any] = {
            "mode": self.mode,
            "n_clusters": self.n_clusters,
            "random_state": self.random_state,
            "clusterer_params": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.clusterer_params.items()},
            "dim": self.dim_,
            "themes": [t for t in self.clusterers_],
            "groups": [],
            "claim_texts": self._claim_texts,
            "claim_node_of": self._claim_node_of,
        }
        info["clusterers"], arrays = clusterers_state(self.clusterers_, self.theme_centroids_)
        info["groups"] = self._clusters.get_state()
        return info, arrays

    @classmethod
    def from_state(
        cls,
        info: Mapping[str, Any],
        arrays: Mapping[str, np.ndarray],
        vectors: Callable[[list[str]], np.ndarray],
        *,
        text_lookup: Callable[[str], str] | None = None,
    ) -> "ThematicContext":
        """Rebuild a fitted context.

        Args:
            info, arrays: output of :meth:`get_state`.
            vectors: ids → their embeddings, shape ``(len(ids), d)``.
            text_lookup: node id → text.
        """
        self = cls(
            info["mode"],
            n_clusters=info["n_clusters"],
            random_state=info["random_state"],
            clusterer_params=info.get("clusterer_params") or {},
            text_lookup=text_lookup,
        )
        self.dim_ = int(info["dim"])
        self._claim_texts = dict(info.get("claim_texts") or {})
        self._claim_node_of = dict(info.get("claim_node_of") or {})
        self.clusterers_, self.theme_centroids_ = clusterers_from_state(info["themes"], info["clusterers"], arrays)
        clusters = MemoryClusters.from_state(
            info["groups"], self.dim_, lambda ids: l2_normalize(as_matrix(vectors(ids), name="stored embeddings"))
        )
        self._publish(clusters)
        self.n_items_ = len(clusters)
        return self

    def evidence_units(self) -> tuple[list[str], np.ndarray]:
        """Ids and unit vectors (shape ``(n, d)``) of the evidence held here, cluster by cluster.

        A server-side context (Qdrant) holds no evidence vectors and returns none.
        """
        self._check_fitted()
        return self._clusters.evidence_units()

    def iter_items(self) -> Iterable[tuple[str, GroupKey]]:
        """``(node_id, (theme, cluster))`` for every clustered item."""
        return self._clusters.iter_items()
