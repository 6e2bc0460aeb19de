"""The fitted thematic context of a corpus: clusters, their members, and SOIs.

:class:`ThematicContext` is what CARAG learns once, at fit time, and reads at
query time:

* every evidence passage and claim, **per cluster**: their unit embeddings in
  contiguous arrays, or, on a FAISS flat store, the passages' keys into the store's
  own rows (no second copy of the corpus), so building an SOI reads one cluster;
* the fitted :class:`~llama_index_carag.core.clustering.ThematicClusterer` — one for
  the whole corpus (CARAG-u) or one per theme (CARAG);
* which claim each evidence passage is annotated for, and each item's theme.

``build_soi(query_vector, …)`` then locates the query's cluster (its own cluster
when the query is a corpus claim, else the clusterer's prediction; for CARAG
first its theme, else the nearest theme centroid) and calls the mode's SOI
builder from :mod:`llama_index_carag.core.soi`.  Nothing is re-embedded per query.

Its clustered claims are a :class:`ClaimTable` (ids, texts, recognising a query as one of them): immutable, so
an update builds a new table and the context swaps it in with one assignment, and a concurrent query reads one
consistent table.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from numbers import Integral
from typing import Any, ClassVar, Literal

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from llama_index_carag.core.cluster_store import (
    ClusterStore,
    GroupKey,
    LazyTexts,
    MemoryClusters,
    MemoryClusterStore,
    TextsOf,
)
from llama_index_carag.core.clustering import ThematicClusterer, clusterers_from_state, clusterers_state
from llama_index_carag.core.corpus_items import CorpusItems, SOIQuery
from llama_index_carag.core.partition_fit import (
    assign_keys,
    fit_partitions,
    groups_of,
    partition_clusterer,
    partitions_of,
    row_groups,
    sorted_groups,
)
from llama_index_carag.core.row_clusters import RowClusterStore
from llama_index_carag.core.soi import (
    ClusterMembers,
    SubsetOfInterest,
    check_soi_query,
    materialize_soi,
    supervised_core,
    unsupervised_core,
)
from llama_index_carag.core.store_rows import StackedRows, StoreHits
from llama_index_carag.core.validation import normalize_text
from llama_index_carag.core.vectors import as_matrix, as_vector, l2_normalize, row_norms

logger = logging.getLogger(__name__)

MODES = ("unsupervised", "supervised")
Mode = Literal["unsupervised", "supervised"]


class ThematicContext(BaseEstimator):
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

    The parameters are checked when the context is fitted (scikit-learn's ``_parameter_constraints``).

    Attributes (after :meth:`fit`):
        clusterers_: ``{theme or None: ThematicClusterer}``.
        theme_centroids_: the themes' unit centroids (:class:`ThemeCentroids`; none in unsupervised mode).
        dim_: embedding dimension.
        cluster_store_: where the members live (:class:`MemoryClusterStore`, a
            :class:`~llama_index_carag.core.row_clusters.RowClusterStore` over a FAISS flat store's rows, or
            Qdrant's cluster store).
        n_items_: number of clustered items.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "mode": [StrOptions(set(MODES))],
        "n_clusters": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "random_state": ["random_state"],
        "clusterer_params": [dict, None],
        "text_lookup": [callable, None],
    }

    def __init__(
        self,
        mode: Mode = "unsupervised",
        *,
        n_clusters: int | Literal["auto"] = 10,
        random_state: int | None = 0,
        clusterer_params: Mapping[str, Any] | None = None,
        text_lookup: Callable[[str], str] | None = None,
    ) -> None:
        self.mode = mode
        self._lock = threading.RLock()
        self.n_clusters = n_clusters
        self.random_state = random_state
        self.clusterer_params = clusterer_params
        self.text_lookup = text_lookup

    # ----------------------------------------------------------------- fitting
    def fit(
        self, items: CorpusItems, *, show_progress: bool = False, copy: bool = True, buffer: np.ndarray | None = None
    ) -> ThematicContext:
        """Cluster ``items`` and store their members per cluster.

        ``items.vectors`` may be a :class:`~llama_index_carag.core.store_rows.StackedRows`: the vector
        store's evidence rows, lent in place, then the claims'.  The clusters then keep each passage's store
        key and norm and read its vector from the store (:class:`~llama_index_carag.core.row_clusters.RowClusterStore`):
        no copy of the corpus (``copy`` and ``buffer`` do not apply).

        Args:
            copy: False lets the context sort and normalise ``items.vectors`` in place and keep it as its
                store (scikit-learn's ``copy``): at a million vectors that saves one 1.5 GB copy.  Only for a
                matrix the caller gives away; ignored (copied) unless it is a writable, C-contiguous float32 array.
            buffer: with ``copy=False``, the array whose leading rows ``items.vectors`` is (also given away): its
                rows past the corpus become the clusters' room to grow, so that an insert appends in place
                (:func:`~llama_index_carag.core.vectors.growth_rows`: inserts of about 3 % of the corpus).  A
                copy always gets that room.

        Raises:
            ValueError: an invalid parameter, empty corpus, NaN vectors, duplicated ids, too many
                clusters, or (supervised) items without a theme.
        """
        self._validate_params()
        items.validate()
        if len(items.ids) == 0:
            raise ValueError("Cannot fit CARAG on an empty corpus (no evidence nodes).")
        X = items.vectors
        if not isinstance(X, StackedRows):
            X = as_matrix(X, name="corpus embeddings")  # no copy for float32 input
        norms = row_norms(X)
        zero = np.flatnonzero(norms == 0)
        if zero.size:
            raise ValueError(f"Node {items.ids[int(zero[0])]!r} has an all-zero embedding.")
        self.dim_ = int(X.shape[1])
        ids = list(items.ids)
        is_claim = np.asarray(items.is_claim, dtype=bool)
        claim_of = list(items.claim_of)
        self._claims = ClaimTable.of_items(items)

        partitions = partitions_of(self.mode, items, ids, self.n_clusters)
        self.clusterers_, labels, theme_index = fit_partitions(
            X, ids, partitions, self.partition_clusterer, show_progress
        )
        store: ClusterStore
        if isinstance(X, StackedRows):
            evidence, claims, centroids = row_groups(
                X, norms, ids, is_claim, claim_of, labels, theme_index, list(partitions)
            )
            store = RowClusterStore.from_groups(X.store, evidence, claims, supervised=self.mode == "supervised")
        else:
            in_place = not copy and X.flags.writeable and X.flags.c_contiguous and X.dtype == np.float32
            groups, centroids = sorted_groups(
                X,
                norms,
                ids,
                is_claim,
                claim_of,
                labels,
                theme_index,
                list(partitions),
                copy=not in_place,
                buffer=buffer if in_place else None,
            )
            store = MemoryClusterStore(MemoryClusters(groups, self.dim_))
        self.theme_centroids_ = ThemeCentroids(centroids)
        self.cluster_store_: ClusterStore = store
        logger.info("Fitted %s context: %d items, %d clusters", self.mode, self.n_items_, len(self.groups))
        return self

    def partition_clusterer(self, theme: str | None, n_rows: int, *, show_progress: bool = False) -> ThematicClusterer:
        """An unfitted mixture with this context's parameters for one partition of ``n_rows`` items."""
        return partition_clusterer(
            self.n_clusters,
            theme,
            n_rows,
            random_state=self.random_state,
            params=self.clusterer_params or {},
            show_progress=show_progress,
        )

    # The members live in a ClusterStore (in memory, or a Qdrant collection).  Writers
    # (add/remove) run under the lock; the in-memory store publishes a new immutable
    # snapshot per write, so a concurrent query always reads a consistent view.
    @property
    def lock(self) -> threading.RLock:
        """The writers' lock (add/remove/sync hold it)."""
        return self._lock

    @property
    def n_items_(self) -> int:
        """Number of clustered items (evidence and claims)."""
        check_is_fitted(self, "cluster_store_")
        return len(self.cluster_store_)

    # ------------------------------------------------------ incremental updates
    def add_items(self, items: CorpusItems) -> list[GroupKey]:
        """Add new nodes without refitting: each gets its cluster from the fitted mixture.

        In supervised mode a node without a theme gets the nearest theme centroid's.
        Ids already in the context are replaced (never duplicated).

        Returns:
            the ``(theme, cluster)`` of each added item.
        """
        check_is_fitted(self, "cluster_store_")
        items.validate()
        if not len(items.ids):
            return []
        unit = items.unit_vectors(self.dim_)
        keys, assigned = assign_keys(self.mode, self.clusterers_, self.nearest_theme, items, unit)
        groups = groups_of(items, unit, keys)
        with self._lock:
            replaced = self.cluster_store_.add(groups, assigned)
            self._claims = self._claims.without(replaced).with_items(items)
        return keys

    def remove_items(self, ids: Iterable[str]) -> int:
        """Drop nodes from every cluster (and so from every SOI).  Unknown ids are ignored.

        Returns:
            how many were removed.
        """
        check_is_fitted(self, "cluster_store_")
        with self._lock:
            removed, claims = self.cluster_store_.remove(list(ids))
            self._claims = self._claims.without(claims)
            return removed

    def nearest_theme(self, unit_vector: np.ndarray) -> str:
        """The theme whose centroid is most similar (cosine) to a unit vector (supervised mode)."""
        return self.theme_centroids_.nearest(unit_vector)

    # ----------------------------------------------------------------- queries
    @property
    def groups(self) -> list[GroupKey]:
        """``(theme, cluster)`` keys of the non-empty clusters."""
        check_is_fitted(self, "cluster_store_")
        return self.cluster_store_.keys()

    def group_size(self, key: GroupKey) -> int:
        """Members of cluster ``key`` (evidence and claims)."""
        return self.cluster_store_.size(key)

    def __contains__(self, node_id: object) -> bool:
        return hasattr(self, "cluster_store_") and node_id in self.cluster_store_

    def claim_node_of(self) -> dict[str, str]:
        """``{claim id: its node id}`` of the clustered claims (a copy)."""
        check_is_fitted(self, "cluster_store_")
        return dict(self._claims.node_of)

    def claim_text(self, node_id: str) -> str:
        """The text of a clustered claim node (empty when unknown)."""
        return self._claims.text(node_id)

    def cluster_of(self, node_id: str) -> int | None:
        """Cluster of a corpus node (``None`` for a node not clustered)."""
        key = self.cluster_store_.key_of(node_id)
        return None if key is None else key[1]

    def theme_of(self, node_id: str) -> str | None:
        """Theme group of a corpus node (supervised mode), else ``None``."""
        key = self.cluster_store_.key_of(node_id)
        return None if key is None else key[0]

    def match_claim(self, text: str) -> str | None:
        """Claim id of the corpus claim whose text equals ``text`` (case/space-insensitive), else ``None``."""
        return self._claims.match(text)

    def locate(self, query_vector: np.ndarray, claim_id: str | None = None, *, unit: bool = False) -> GroupKey:
        """The ``(theme, cluster)`` of a query: a corpus claim's own, else predicted.

        For supervised mode, an unknown claim gets the theme whose centroid is
        closest (cosine) and then that theme's predicted cluster.  ``unit=True``: the
        vector is already a checked unit vector of the context's dimension.
        """
        check_is_fitted(self, "cluster_store_")
        node_id = self._claims.node_of.get(claim_id) if claim_id is not None else None
        key = None if node_id is None else self.cluster_store_.key_of(node_id)
        if key is not None:
            return key
        q = query_vector if unit else l2_normalize(as_vector(query_vector, dim=self.dim_))
        if self.mode == "supervised":
            theme: str | None = self.nearest_theme(q)
        else:
            theme = None
        cluster = int(self.clusterers_[theme].predict(q[None, :])[0])
        return (theme, cluster)

    def _texts(self) -> TextsOf:
        claims = self._claims.texts
        lookup = self.text_lookup or (lambda node_id: claims.get(node_id, ""))
        return lambda ids: LazyTexts(ids, lambda i: claims.get(i) or lookup(i))

    def members(self, key: GroupKey, *, include_texts: bool = True) -> ClusterMembers:
        """The members of cluster ``key`` (in memory: views, no copies; texts looked up lazily, or not at all)."""
        check_is_fitted(self, "cluster_store_")
        return self.cluster_store_.members(key, self._texts() if include_texts else None)

    def build_soi(
        self,
        query_vector: np.ndarray,
        delta: float,
        *,
        claim: str = "",
        claim_id: str | None = None,
        top_m: int | None = None,
        min_size: int = 0,
        n_related_claims: int = 0,
        include_texts: bool = True,
    ) -> SubsetOfInterest:
        """The SOI of a query vector (shape ``(d,)``) at threshold ``delta`` (at most ``top_m`` items, at least
        ``min_size`` when the cluster has them).

        ``claim_id`` marks the query as a corpus claim (found from ``claim`` by
        :meth:`match_claim` when not given).
        """
        q = self.query_soi(
            query_vector,
            delta,
            claim=claim,
            claim_id=claim_id,
            top_m=top_m,
            min_size=min_size,
            n_related_claims=n_related_claims,
            include_texts=include_texts,
        )
        return materialize_soi(
            q.core,
            q.members,
            mode=self.mode,
            claim=claim,
            claim_id=q.claim_id,
            delta=delta,
            cluster=q.key[1],
            theme=q.key[0],
            min_size=min_size,
        )

    def query_soi(
        self,
        query_vector: np.ndarray,
        delta: float,
        *,
        claim: str = "",
        claim_id: str | None = None,
        top_m: int | None = None,
        min_size: int = 0,
        n_related_claims: int = 0,
        include_texts: bool = False,
        unit: bool = False,
        nearest: StoreHits | None = None,
    ) -> SOIQuery:
        """Locate the query and compute its SOI as rows (:class:`SOICore`) — retrieval's fast path.

        The query vector is checked and normalised once, here; ``unit=True`` says the caller
        did it already (a finite unit vector of the context's dimension; ``delta`` and
        ``top_m``, ``min_size`` validated).  ``nearest``: the vector store's hits for this query's vector,
        when its dense search ran first (they may spare the cluster store a scan; the SOI is the same).
        """
        check_is_fitted(self, "cluster_store_")
        q = query_vector if unit else l2_normalize(check_soi_query(query_vector, self.dim_, delta, top_m, min_size))
        if claim_id is None and claim:
            claim_id = self.match_claim(claim)
        key = self.locate(q, claim_id, unit=True)
        texts = self._texts() if include_texts else None
        members = self.cluster_store_.query_members(key, q, delta, top_m, texts, min_size=min_size, nearest=nearest)
        if self.mode == "supervised":
            core = supervised_core(q, members, delta, claim_id=claim_id, top_m=top_m, min_size=min_size, unit=True)
        else:
            core = unsupervised_core(
                q,
                members,
                delta,
                claim_id=claim_id,
                top_m=top_m,
                min_size=min_size,
                n_related_claims=n_related_claims,
                unit=True,
            )
        size = self.cluster_store_.cluster_size(key, claim_id, core)
        if size != core.cluster_size:
            core = dataclasses.replace(core, cluster_size=size)
        return SOIQuery(key, claim_id, members, core)

    def unit_vectors(self, node_ids: Sequence[str]) -> list[np.ndarray | None]:
        """Stored unit embeddings (shape ``(d,)``) of several nodes (``None`` for unknown ones)."""
        return self.vectors_and_clusters(node_ids)[0]

    def clusters_of(self, node_ids: Sequence[str]) -> list[int | None]:
        """Clusters of several nodes (``None`` for unknown ones)."""
        return self.vectors_and_clusters(node_ids)[1]

    def vectors_and_clusters(self, node_ids: Sequence[str]) -> tuple[list[np.ndarray | None], list[int | None]]:
        """:meth:`unit_vectors` and :meth:`clusters_of` together (one round trip for remote stores)."""
        check_is_fitted(self, "cluster_store_")
        return self.cluster_store_.vectors_and_clusters(node_ids)

    # --------------------------------------------------------------- state I/O
    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-safe info, arrays) describing the fitted context, without embeddings.

        Embeddings are restored from the vector store (evidence) and from the
        saved claim vectors by :meth:`from_state`.
        """
        check_is_fitted(self, "cluster_store_")
        info: dict[str, Any] = {
            "mode": self.mode,
            "n_clusters": self.n_clusters,
            "random_state": self.random_state,
            "clusterer_params": {
                k: (list(v) if isinstance(v, tuple) else v) for k, v in (self.clusterer_params or {}).items()
            },
            "dim": self.dim_,
            "themes": [t for t in self.clusterers_],
            "claim_texts": self._claims.texts,
            "claim_node_of": self._claims.node_of,
        }
        info["clusterers"], arrays = clusterers_state(self.clusterers_, self.theme_centroids_.by_theme)
        info.update(self.cluster_store_.get_state())
        return info, arrays

    @classmethod
    def from_fitted(
        cls,
        params: Mapping[str, Any],
        *,
        clusterers: Mapping[str | None, ThematicClusterer],
        theme_centroids: Mapping[str, np.ndarray],
        dim: int,
        claim_texts: Mapping[str, str],
        claim_node_of: Mapping[str, str],
        store: ClusterStore,
        text_lookup: Callable[[str], str] | None = None,
    ) -> ThematicContext:
        """A fitted context from its parts (what a store-specific fit or a saved state produced).

        Args:
            params: the constructor's ``mode``, ``n_clusters``, ``random_state``, ``clusterer_params``.
            clusterers: ``{theme or None: fitted ThematicClusterer}``.
            theme_centroids: ``{theme: unit centroid, shape (d,)}`` (supervised).
            claim_texts, claim_node_of: claim node id → text; claim id → claim node id.
            store: the members.
        """
        self = cls(
            params["mode"],
            n_clusters=params["n_clusters"],
            random_state=params["random_state"],
            clusterer_params=params.get("clusterer_params") or {},
            text_lookup=text_lookup,
        )
        self._validate_params()
        self.dim_ = int(dim)
        self.clusterers_ = dict(clusterers)
        self.theme_centroids_ = ThemeCentroids(theme_centroids)
        self._claims = ClaimTable(claim_node_of, claim_texts)
        self.cluster_store_ = store
        return self

    @classmethod
    def from_state(
        cls,
        info: Mapping[str, Any],
        arrays: Mapping[str, np.ndarray],
        vectors: Callable[[list[str]], np.ndarray],
        *,
        text_lookup: Callable[[str], str] | None = None,
        store: Callable[[Mapping[str, Any], int, Callable[[list[str]], np.ndarray]], ClusterStore] | None = None,
    ) -> ThematicContext:
        """Rebuild a fitted context.

        Args:
            info, arrays: output of :meth:`get_state`.
            vectors: ids → their embeddings, shape ``(len(ids), d)``.
            text_lookup: node id → text.
            store: ``(info, dim, unit_vectors) -> ClusterStore`` (default: :meth:`MemoryClusterStore.from_state`).
        """
        dim = int(info["dim"])
        clusterers, centroids = clusterers_from_state(info["themes"], info["clusterers"], arrays)
        unit_vectors = lambda ids: l2_normalize(as_matrix(vectors(ids), name="stored embeddings"))  # noqa: E731
        return cls.from_fitted(
            info,
            clusterers=clusterers,
            theme_centroids=centroids,
            dim=dim,
            claim_texts=info.get("claim_texts") or {},
            claim_node_of=info.get("claim_node_of") or {},
            store=(store or MemoryClusterStore.from_state)(info, dim, unit_vectors),
            text_lookup=text_lookup,
        )

    def evidence_units(self) -> tuple[list[str], np.ndarray]:
        """Ids and unit vectors (shape ``(n, d)``) of the evidence held in memory, cluster by cluster.

        A server-side store (Qdrant) holds no evidence vectors and returns none.
        """
        check_is_fitted(self, "cluster_store_")
        return self.cluster_store_.evidence_units()

    def evidence_blocks(self) -> Iterable[tuple[list[str], np.ndarray]]:
        """:meth:`evidence_units` cluster by cluster, ``(ids, unit vectors of shape (k, d))``, without one big copy."""
        check_is_fitted(self, "cluster_store_")
        return self.cluster_store_.evidence_blocks()

    def iter_items(self) -> Iterable[tuple[str, GroupKey]]:
        """``(node_id, (theme, cluster))`` for every clustered item."""
        check_is_fitted(self, "cluster_store_")
        return self.cluster_store_.iter_items()


class ThemeCentroids:
    """``{theme: unit centroid, shape (d,)}`` as one matrix, for :meth:`nearest` (empty: no themes)."""

    def __init__(self, centroids: Mapping[str, np.ndarray]) -> None:
        self.by_theme = dict(centroids)
        self._names = list(self.by_theme)
        self._matrix = np.vstack([self.by_theme[t] for t in self._names]) if self._names else None

    def nearest(self, unit_vector: np.ndarray) -> str:
        """The theme whose centroid is most similar (cosine) to a unit vector, shape ``(d,)``."""
        if self._matrix is None:
            raise ValueError("This context has no themes.")
        return self._names[int(np.argmax(self._matrix @ unit_vector))]


class ClaimTable:
    """``{claim id: claim node id}`` and ``{claim node id: text}`` of the clustered claims.

    Args:
        node_of: claim id (the annotation key) → the claim's node id.
        texts: claim node id → its text.
    """

    __slots__ = ("node_of", "texts", "_by_text")

    def __init__(self, node_of: Mapping[str, str] | None = None, texts: Mapping[str, str] | None = None) -> None:
        self.node_of: dict[str, str] = dict(node_of or {})
        self.texts: dict[str, str] = dict(texts or {})
        self._by_text: dict[str, str] | None = None

    @classmethod
    def of_items(cls, items: CorpusItems) -> ClaimTable:
        """The claims among ``items`` (rows with ``is_claim``)."""
        return cls().with_items(items)

    def with_items(self, items: CorpusItems) -> ClaimTable:
        """This table plus the claims among ``items`` (a claim id seen again points to its new node)."""
        node_of = dict(self.node_of)
        claim_of = list(items.claim_of)
        for i in np.flatnonzero(np.asarray(items.is_claim, dtype=bool)):
            node_of[str(claim_of[i])] = items.ids[int(i)]
        return ClaimTable(node_of, {**self.texts, **(items.claim_texts or {})})

    def without(self, removed: Sequence[tuple[str, str | None]]) -> ClaimTable:
        """This table without the removed ``(node id, claim id)`` pairs (``self`` when there are none)."""
        if not removed:
            return self
        node_of, texts = dict(self.node_of), dict(self.texts)
        for node_id, claim in removed:
            node_of.pop(str(claim), None)
            texts.pop(node_id, None)
        return ClaimTable(node_of, texts)

    def text(self, node_id: str) -> str:
        """The text of a claim node (empty when unknown)."""
        return self.texts.get(node_id, "")

    def match(self, text: str) -> str | None:
        """Claim id of the claim whose text equals ``text`` (case/space-insensitive), else ``None``."""
        if self._by_text is None:
            node_claim = {node: cid for cid, node in self.node_of.items()}
            self._by_text = {normalize_text(t): node_claim[n] for n, t in self.texts.items() if n in node_claim}
        return self._by_text.get(normalize_text(text))
