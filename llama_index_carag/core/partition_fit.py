"""Fitting a corpus's mixtures partition by partition (pure helpers of the in-memory fit).

A *partition* is the set of items clustered together: every item (CARAG-u) or one
theme (CARAG).  :func:`partitions_of` finds them, :func:`partition_clusterer` makes
the mixture of one (``t`` capped at a small theme's size; the Qdrant fit uses it too),
:func:`fit_partitions` fits one mixture per partition in the canonical (node-id)
order, and :func:`sorted_groups` lays the corpus out cluster by cluster.  Items added later, without
refitting: :func:`assign_keys` gives each its partition and cluster, :func:`groups_of` groups them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from llama_index_carag.core.cluster_store import ClusterGroup, GroupKey, GrowthBuffer
from llama_index_carag.core.clustering import ThematicClusterer
from llama_index_carag.core.corpus_items import CorpusItems
from llama_index_carag.core.row_clusters import RowGroup
from llama_index_carag.core.store_rows import StackedRows
from llama_index_carag.core.vectors import (
    divide_rows_inplace,
    growth_rows,
    l2_normalize,
    permute_rows_inplace,
    spread_blocks_inplace,
)

logger = logging.getLogger(__name__)


def _progress(iterable: Any, total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="theme" if total > 1 else "step")


def _is_count(k: Any) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, bool)


def partitions_of(
    mode: str, items: CorpusItems, ids: list[str], n_clusters: int | Literal["auto"]
) -> dict[str | None, np.ndarray]:
    """Row indices clustered together: ``{theme: rows}`` (supervised) or ``{None: all rows}``.

    Raises:
        ValueError: a supervised item without a theme, or ``n_clusters`` above ``len(ids)``.
    """
    if mode == "supervised":
        themes = list(items.themes) if items.themes is not None else [None] * len(ids)
        missing = [i for i, t in enumerate(themes) if t is None or str(t) == ""]
        if missing:
            raise ValueError(
                f"Supervised CARAG needs a theme on every node; {len(missing)} node(s) lack it "
                f"(e.g. {ids[missing[0]]!r}). Set the theme metadata key or use mode='unsupervised'."
            )
        theme_arr = np.asarray(themes, dtype=object)
        partitions: dict[str | None, np.ndarray] = {
            t: np.flatnonzero(theme_arr == t) for t in sorted({t for t in themes if t is not None})
        }
    else:
        partitions = {None: np.arange(len(ids))}
    if _is_count(n_clusters) and n_clusters > len(ids):  # type: ignore[operator]
        raise ValueError(f"n_clusters={n_clusters} is larger than the number of nodes to cluster ({len(ids)}).")
    return partitions


def partition_clusterer(
    n_clusters: int | Literal["auto"],
    theme: str | None,
    n_rows: int,
    *,
    random_state: int | None,
    params: Mapping[str, Any],
    show_progress: bool = False,
) -> ThematicClusterer:
    """An unfitted mixture for one partition of ``n_rows`` items (``t`` capped at a theme's size, with a warning).

    Raises:
        ValueError: ``t`` above the number of items of the whole (unsupervised) corpus.
    """
    k: int | str = n_clusters
    if _is_count(k) and k > n_rows:  # type: ignore[operator]
        if theme is None:
            raise ValueError(f"n_clusters={k} is larger than the number of nodes to cluster ({n_rows}).")
        logger.warning("Theme %r has only %d nodes; using %d clusters instead of %d.", theme, n_rows, n_rows, k)
        k = n_rows
    return ThematicClusterer(
        n_clusters=k,  # type: ignore[arg-type]
        random_state=random_state,
        normalize=True,
        show_progress=show_progress,
        **params,
    )


def fit_partitions(
    X: np.ndarray,
    ids: list[str],
    partitions: Mapping[str | None, np.ndarray],
    make: Callable[..., ThematicClusterer],
    show_progress: bool,
) -> tuple[dict[str | None, ThematicClusterer], np.ndarray, np.ndarray]:
    """Fit one mixture per partition of ``X`` (shape ``(n, d)``).

    ``make(theme, n_rows, show_progress=...)`` gives each partition's unfitted mixture.

    Returns:
        ``(clusterers, labels, partition index)``; the last two have shape ``(n,)``.
    """
    clusterers: dict[str | None, ThematicClusterer] = {}
    labels = np.empty(len(ids), dtype=np.int64)
    theme_index = np.empty(len(ids), dtype=np.int64)
    for t_i, (theme, rows) in enumerate(_progress(partitions.items(), len(partitions), "Clustering", show_progress)):
        clusterer = make(theme, len(rows), show_progress=show_progress)
        part = X if len(rows) == len(ids) else X[rows]
        # Canonical order (by node id): the same corpus gives the same clusters in any storage order.
        canonical = np.argsort(np.asarray([ids[r] for r in rows], dtype=object), kind="stable")
        labels[rows] = clusterer.fit(part, order=canonical).labels_
        del part
        theme_index[rows] = t_i
        clusterers[theme] = clusterer
    return clusterers, labels, theme_index


def _cluster_layout(is_claim: np.ndarray, labels: np.ndarray, theme_index: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The corpus's rows cluster after cluster (by theme, then cluster; evidence before claims, each in row
    order), and where each cluster starts (with the end last)."""
    order = np.lexsort((is_claim, labels, theme_index))
    keys = theme_index[order] * (int(labels.max()) + 1) + labels[order]
    return order, [0, *(np.flatnonzero(np.diff(keys)) + 1).tolist(), len(order)]


def sorted_groups(
    X: np.ndarray,
    norms: np.ndarray,
    ids: list[str],
    is_claim: np.ndarray,
    claim_of: list[str | None],
    labels: np.ndarray,
    theme_index: np.ndarray,
    theme_names: list[str | None],
    *,
    copy: bool = True,
    buffer: np.ndarray | None = None,
) -> tuple[dict[GroupKey, ClusterGroup], dict[str, np.ndarray]]:
    """One sorted, normalised copy of the corpus ``X`` (shape ``(n, d)``, row norms ``norms``), cluster after
    cluster, with spare rows after each cluster (:func:`~llama_index_carag.core.vectors.growth_rows` of the
    corpus, shared in proportion to the clusters' sizes) that later inserts append into.

    Args:
        copy: False sorts and normalises ``X`` itself, in place (no second matrix; the caller gives
            ``X`` away: it must be a writable, C-contiguous float32 array).
        buffer: with ``copy=False``, the array whose leading rows ``X`` is; the rows past ``X`` are the spare
            rows (none without it).

    Returns:
        ``({(theme, cluster): ClusterGroup}, {theme: unit centroid})``; every group is a
        contiguous view of the copy (claims after evidence).
    """
    n = X.shape[0]
    order, bounds = _cluster_layout(is_claim, labels, theme_index)
    if copy:
        rows_buffer = np.empty((n + growth_rows(n), X.shape[1]), dtype=np.float32)
        np.take(X, order, axis=0, out=rows_buffer[:n], mode="clip")  # 'clip': no buffered copy (valid rows)
    else:
        permute_rows_inplace(X, order)
        rows_buffer = X if buffer is None else _checked_buffer(buffer, X)
    unit = rows_buffer[:n]
    divide_rows_inplace(unit, norms[order].astype(np.float32))
    sizes = [stop - start for start, stop in zip(bounds[:-1], bounds[1:])]
    spare = rows_buffer.shape[0] - n
    room = [spare * size // n for size in sizes]
    firsts = spread_blocks_inplace(rows_buffer, sizes, room)
    groups: dict[GroupKey, ClusterGroup] = {}
    for start, stop, first, extra in zip(bounds[:-1], bounds[1:], firsts, room):
        rows = order[start:stop]
        key: GroupKey = (theme_names[int(theme_index[rows[0]])], int(labels[rows[0]]))
        size = stop - start
        growth = GrowthBuffer(rows_buffer[first : first + size + extra], used=size)
        groups[key] = ClusterGroup(
            [ids[r] for r in rows], growth.rows[:size], is_claim[rows], [claim_of[r] for r in rows], growth
        )
    centroids: dict[str, np.ndarray] = {}
    for theme in theme_names:
        if theme is not None:
            members = [g.unit for (t, _), g in groups.items() if t == theme]
            total = sum(m.sum(axis=0, dtype=np.float64) for m in members)
            centroids[theme] = l2_normalize(np.asarray(total, dtype=np.float32))
    return groups, centroids


def row_groups(
    X: StackedRows,
    norms: np.ndarray,
    ids: list[str],
    is_claim: np.ndarray,
    claim_of: list[str | None],
    labels: np.ndarray,
    theme_index: np.ndarray,
    theme_names: list[str | None],
) -> tuple[dict[GroupKey, RowGroup], dict[GroupKey, ClusterGroup], dict[str, np.ndarray]]:
    """The corpus ``X`` (the store's evidence rows, then the claims) laid out cluster by cluster, in the order
    :func:`sorted_groups` gives, without copying the evidence: each cluster's evidence as store keys and norms,
    its claims as unit vectors.

    Returns:
        ``({key: evidence RowGroup}, {key: claims ClusterGroup}, {theme: unit centroid})``.
    """
    order, bounds = _cluster_layout(is_claim, labels, theme_index)
    evidence: dict[GroupKey, RowGroup] = {}
    claims: dict[GroupKey, ClusterGroup] = {}
    sums: dict[str, np.ndarray] = {}
    for start, stop in zip(bounds[:-1], bounds[1:]):
        rows = order[start:stop]
        key: GroupKey = (theme_names[int(theme_index[rows[0]])], int(labels[rows[0]]))
        stored = rows[rows < X.n_store]
        own = rows[rows >= X.n_store]
        if stored.size:
            evidence[key] = RowGroup(
                [ids[r] for r in stored.tolist()], X.keys[stored], norms[stored], [claim_of[r] for r in stored.tolist()]
            )
        if own.size:
            unit = X[own]
            divide_rows_inplace(unit, norms[own].astype(np.float32))
            claims[key] = ClusterGroup(
                [ids[r] for r in own.tolist()], unit, is_claim[own], [claim_of[r] for r in own.tolist()]
            )
        if key[0] is not None:
            total = np.zeros(X.shape[1], dtype=np.float64)
            for block in range(0, stop - start, 65_536):
                part = rows[block : block + 65_536]
                unit = X[part]
                divide_rows_inplace(unit, norms[part].astype(np.float32))
                total += unit.sum(axis=0, dtype=np.float64)
            sums[key[0]] = sums.get(key[0], 0) + total
    centroids = {t: l2_normalize(np.asarray(v, dtype=np.float32)) for t, v in sums.items()}
    return evidence, claims, centroids


def _checked_buffer(buffer: np.ndarray, X: np.ndarray) -> np.ndarray:
    """``buffer`` once checked to start with ``X``'s rows (same memory, dtype and width, writable, C-contiguous)."""
    same_start = buffer.__array_interface__["data"][0] == X.__array_interface__["data"][0]
    if not (
        same_start
        and buffer.dtype == X.dtype
        and buffer.ndim == 2
        and buffer.shape[1] == X.shape[1]
        and buffer.shape[0] >= X.shape[0]
        and buffer.flags.c_contiguous
        and buffer.flags.writeable
    ):
        raise ValueError("buffer must be a writable C-contiguous array whose leading rows are the corpus matrix.")
    return buffer


def assign_keys(
    mode: str,
    clusterers: Mapping[str | None, ThematicClusterer],
    nearest_theme: Callable[[np.ndarray], str],
    items: CorpusItems,
    unit: np.ndarray,
) -> tuple[list[GroupKey], dict[str, str]]:
    """Each new item's ``(theme, cluster)`` from the fitted mixtures (``unit``: its unit vectors, ``(n, d)``).

    Supervised: an item without a known theme takes ``nearest_theme``'s.  Returns the keys and
    ``{item id: theme}`` of the themes so assigned.
    """
    themes = list(items.themes) if items.themes is not None else [None] * len(items.ids)
    keys: list[GroupKey] = []
    assigned: dict[str, str] = {}
    for i in range(len(items.ids)):
        theme = themes[i] if mode == "supervised" else None
        if mode == "supervised" and (theme is None or theme not in clusterers):
            theme = assigned[items.ids[i]] = nearest_theme(unit[i])
        keys.append((theme, -1))
    for theme in {k[0] for k in keys}:
        rows = [i for i, k in enumerate(keys) if k[0] == theme]
        for i, label in zip(rows, clusterers[theme].predict(unit[rows])):
            keys[i] = (theme, int(label))
    return keys, assigned


def groups_of(items: CorpusItems, unit: np.ndarray, keys: Sequence[GroupKey]) -> dict[GroupKey, ClusterGroup]:
    """``items`` (unit vectors ``unit``, shape ``(n, d)``) grouped by their ``(theme, cluster)``."""
    claim_of = list(items.claim_of)
    is_claim = np.asarray(items.is_claim, dtype=bool)
    groups: dict[GroupKey, ClusterGroup] = {}
    for key in dict.fromkeys(keys):
        rows = [i for i, k in enumerate(keys) if k == key]
        groups[key] = ClusterGroup(
            [items.ids[r] for r in rows], unit[rows], is_claim[rows], [claim_of[r] for r in rows]
        )
    return groups
