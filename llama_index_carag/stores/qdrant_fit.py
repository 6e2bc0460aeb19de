"""Fitting a :class:`~llama_index_carag.core.context.ThematicContext` on a Qdrant collection.

:func:`fit_qdrant_context` lists the points (ids and, for CARAG, themes and claim
links; no vectors), fits each partition's mixture on a bounded sample fetched in the
in-memory fit's canonical order, then scrolls the collection once to predict every
point's cluster and write it into the payload.  The result holds a
:class:`~llama_index_carag.stores.qdrant_clusters.QdrantClusterStore`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from llama_index_carag.core.cluster_store import ClusterGroup, GroupKey, MemoryClusters, MemoryClusterStore
from llama_index_carag.core.context import ThematicContext
from llama_index_carag.core.corpus_items import CorpusItems
from llama_index_carag.core.vectors import l2_normalize
from llama_index_carag.stores.qdrant_clusters import (
    CLUSTER_PAYLOAD_KEY,
    QdrantClusterStore,
    QdrantCollection,
    payload_str,
)

logger = logging.getLogger(__name__)


def fit_qdrant_context(
    vector_store: Any,
    claims: CorpusItems,
    *,
    mode: Literal["unsupervised", "supervised"] = "unsupervised",
    n_clusters: int | Literal["auto"] = 10,
    random_state: int | None = 0,
    clusterer_params: Mapping[str, Any] | None = None,
    theme_key: str = "theme",
    claim_key: str = "claim_id",
    show_progress: bool = False,
) -> ThematicContext:
    """Cluster the collection's points plus ``claims`` and write the clusters into the payloads.

    Raises:
        ValueError: an empty collection, claim vectors of another dimension, or (supervised)
            nodes without a theme.
    """
    claims.validate()
    context = ThematicContext(mode, n_clusters=n_clusters, random_state=random_state, clusterer_params=clusterer_params)
    collection = QdrantCollection(vector_store, theme_key, claim_key)
    points = _list_points(collection, claims, supervised=mode == "supervised")
    dim = int(collection.vector(collection.retrieve([points.ids[0]], with_vectors=True, payload=False)[0]).shape[0])
    claim_vectors = _claim_vectors(claims, dim)
    claim_themes: list[str | None] = list(claims.themes) if claims.themes is not None else [None] * len(claims.ids)
    partitions = _partitions(points, claims.ids, claim_themes, mode)
    clusterers = _fit_clusterers(
        context, collection, points, claims, claim_vectors, claim_themes, list(partitions), dim, show_progress
    )
    counts, sums = _assign_all(collection, clusterers, dict(zip(points.ids, points.themes)))
    centroids = (
        # supervised: _partitions checked that every node has a theme, so no key is None
        {t: l2_normalize(np.asarray(v, dtype=np.float32)) for t, v in sums.items() if t is not None}
        if mode == "supervised"
        else {}
    )
    store = QdrantClusterStore(
        collection,
        supervised=mode == "supervised",
        dim=dim,
        claims=MemoryClusterStore(
            MemoryClusters(_claim_groups(claims, claim_vectors, claim_themes, clusterers, mode), dim)
        ),
        counts=counts,
        exclude=points.claims_in_collection,
    )
    logger.info("Fitted %s context on Qdrant collection %r: %d points", mode, collection.name, len(points.ids))
    return ThematicContext.from_fitted(
        {"mode": mode, "n_clusters": n_clusters, "random_state": random_state, "clusterer_params": clusterer_params},
        clusterers=clusterers,
        theme_centroids=centroids,
        dim=dim,
        claim_texts=claims.claim_texts or {},
        claim_node_of={str(c): i for i, c in zip(claims.ids, claims.claim_of)},
        store=store,
    )


def _fit_clusterers(
    context: ThematicContext,
    collection: QdrantCollection,
    points: _Points,
    claims: CorpusItems,
    claim_vectors: np.ndarray,
    claim_themes: list[str | None],
    partitions: list[str | None],
    dim: int,
    show_progress: bool,
) -> dict[str | None, Any]:
    """One fitted mixture per partition (a theme, or ``None``: everything), its points and claims."""
    clusterers = {}
    for theme in partitions:
        ev = (
            [i for i, t in enumerate(points.themes) if t == theme]
            if theme is not None
            else list(range(len(points.ids)))
        )
        cl = (
            [i for i, t in enumerate(claim_themes) if t == theme] if theme is not None else list(range(len(claims.ids)))
        )
        clusterers[theme] = _fit_partition(
            context,
            collection,
            theme,
            [points.ids[i] for i in ev],
            [claims.ids[i] for i in cl],
            claim_vectors[cl],
            dim,
            show_progress,
        )
    return clusterers


class _Points:
    """Ids, themes and claim links of the collection's evidence points (claims stored as points left out)."""

    def __init__(self, ids: list[str], themes: list[str | None], claims_in_collection: list[str]) -> None:
        self.ids, self.themes, self.claims_in_collection = ids, themes, claims_in_collection


def _list_points(collection: QdrantCollection, claims: CorpusItems, *, supervised: bool) -> _Points:
    wanted = [collection.theme_key, collection.claim_key] if supervised else False
    ids: list[str] = []
    themes: list[str | None] = []
    for page in collection.scroll(with_vectors=False, payload=wanted):
        for point in page:
            ids.append(str(point.id))
            themes.append(payload_str((point.payload or {}).get(collection.theme_key)) if supervised else None)
    claim_set = set(claims.ids)
    in_collection = sorted(i for i in ids if i in claim_set)
    if in_collection:  # claims stored as points are claims, never evidence
        keep = [k for k, i in enumerate(ids) if i not in claim_set]
        ids, themes = [ids[k] for k in keep], [themes[k] for k in keep]
    if not ids:
        raise ValueError("The Qdrant collection is empty: add evidence nodes before fitting CARAG.")
    return _Points(ids, themes, in_collection)


def _claim_vectors(claims: CorpusItems, dim: int) -> np.ndarray:
    """The claims' vectors, shape ``(n_claims, dim)``."""
    vectors = np.asarray(claims.vectors, dtype=np.float32)
    vectors = vectors.reshape(len(claims.ids), vectors.shape[-1] if vectors.size else dim)
    if vectors.shape[0] and vectors.shape[1] != dim:
        raise ValueError(f"Claim embeddings have dimension {vectors.shape[1]} but the collection's have {dim}.")
    return vectors


def _partitions(
    points: _Points, claim_ids: Sequence[str], claim_themes: list[str | None], mode: str
) -> list[str | None]:
    if mode != "supervised":
        return [None]
    missing = [i for i, t in zip(points.ids + list(claim_ids), points.themes + claim_themes) if not t]
    if missing:
        raise ValueError(
            f"Supervised CARAG needs a theme on every node; {len(missing)} node(s) lack it (e.g. {missing[0]!r})."
        )
    return sorted(set(points.themes) | set(claim_themes))  # type: ignore[type-var]


def _fit_partition(
    context: ThematicContext,
    collection: QdrantCollection,
    theme: str | None,
    evidence_ids: list[str],
    claim_ids: Sequence[str],
    claim_vectors: np.ndarray,
    dim: int,
    show_progress: bool,
) -> Any:
    """One partition's mixture, fitted on the sample the in-memory fit would draw (same canonical order)."""
    all_ids = list(evidence_ids) + list(claim_ids)
    clusterer = context.partition_clusterer(theme, len(all_ids), show_progress=show_progress)
    canonical = np.argsort(np.asarray(all_ids, dtype=object), kind="stable")
    positions = clusterer.sample_positions(len(all_ids))
    rows = canonical if positions is None else canonical[positions]
    wanted = [all_ids[r] for r in rows]
    evidence, local = set(evidence_ids), dict(zip(claim_ids, claim_vectors))
    fetched = {
        str(p.id): collection.vector(p)
        for p in collection.retrieve([i for i in wanted if i in evidence], with_vectors=True, payload=False)
    }
    sample = np.empty((len(wanted), dim), dtype=np.float32)
    for r, node_id in enumerate(wanted):
        sample[r] = fetched[node_id] if node_id in fetched else local[node_id]
    return clusterer.fit(sample)  # already in canonical order, already within the sample size


def _assign_all(
    collection: QdrantCollection, clusterers: Mapping[str | None, Any], theme_of: Mapping[str, str | None]
) -> tuple[dict[GroupKey, int], dict[str | None, np.ndarray]]:
    """Scroll once: predict clusters and write them into payloads; ``(counts, per-theme sums of unit vectors)``."""
    counts: dict[GroupKey, int] = {}
    sums: dict[str | None, np.ndarray] = {}
    for page in collection.scroll(with_vectors=True, payload=False):
        pids = [str(p.id) for p in page]
        unit = l2_normalize(np.vstack([collection.vector(p) for p in page]))
        page_themes = [theme_of.get(i) for i in pids]
        for theme in set(page_themes):
            rows = [r for r, t in enumerate(page_themes) if t == theme]
            labels = clusterers[theme].predict(unit[rows])
            for label in set(labels.tolist()):
                members = [pids[rows[j]] for j in np.flatnonzero(labels == label)]
                collection.set_payload({CLUSTER_PAYLOAD_KEY: int(label)}, members)
                counts[(theme, int(label))] = counts.get((theme, int(label)), 0) + len(members)
            sums[theme] = sums.get(theme, 0) + unit[rows].sum(axis=0, dtype=np.float64)
    return counts, sums


def _claim_groups(
    claims: CorpusItems,
    claim_vectors: np.ndarray,
    claim_themes: list[str | None],
    clusterers: Mapping[str | None, Any],
    mode: str,
) -> dict[GroupKey, ClusterGroup]:
    """The claims by cluster (they stay in memory)."""
    groups: dict[GroupKey, ClusterGroup] = {}
    for i, (cid, theme) in enumerate(zip(claims.ids, claim_themes)):
        part = theme if mode == "supervised" else None
        key = (part, int(clusterers[part].predict(claim_vectors[i : i + 1])[0]))
        one = ClusterGroup([cid], l2_normalize(claim_vectors[i : i + 1]), np.array([True]), [claims.claim_of[i]])
        groups[key] = one if key not in groups else groups[key].extended(one)
    return groups
