"""Where the members of each cluster live: the :class:`ClusterStore` protocol and its in-memory adapter.

:class:`MemoryClusters` holds unit vectors contiguously per cluster in one immutable
snapshot (evidence and claims of the stores that cannot lend their rows; only the claims for FAISS flat
stores, whose rows the clusters read in place, and for Qdrant, whose evidence clusters live in the point
payloads).  A snapshot never changes: a
writer (add/remove) builds a new one and publishes it with one assignment, so a
concurrent query always reads a consistent view.  :class:`MemoryClusterStore` is the
:class:`ClusterStore` adapter over it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, Protocol

import numpy as np

from llama_index_carag.core.soi import ClusterMembers, SOICore
from llama_index_carag.core.store_rows import StoreHits
from llama_index_carag.core.vectors import growth_rows

#: A delete copies a cluster without its dead rows once they would be more than this fraction of its rows.
COMPACT_DEAD = 0.25

#: ``(theme or None, cluster)``.
GroupKey = tuple[str | None, int]
#: member ids -> their texts (a lazy sequence is fine).
TextsOf = Callable[[Sequence[str]], Sequence[str]]


class LazyTexts(Sequence[str]):
    """Texts of some members, looked up by id only for the items that are read (SOI items kept)."""

    def __init__(self, ids: Sequence[str], lookup: Callable[[str], str]) -> None:
        self._ids = ids
        self._lookup = lookup

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._lookup(x) for x in self._ids[i]]
        return self._lookup(self._ids[int(i)])


class ClusterGroup:
    """The members of one cluster, stored contiguously (ids, unit vectors, claim flags, claim links).

    ``unit`` may be a view of the first rows of a larger buffer that later snapshots of the same cluster
    append into (:meth:`extended`): rows past a group's own length are never part of it, so an older
    snapshot read by a concurrent query never changes.  A delete marks rows dead (``live``, ``None``: all
    live) and shares every array with the snapshot before it; the dead rows are dropped by a copy once they
    are more than :data:`COMPACT_DEAD` of the rows.
    """

    __slots__ = ("ids", "unit", "is_claim", "claim_of", "_buffer", "live")

    def __init__(
        self,
        ids: list[str],
        unit: np.ndarray,
        is_claim: np.ndarray,
        claim_of: list[str | None],
        _buffer: GrowthBuffer | None = None,
        live: np.ndarray | None = None,
    ) -> None:
        self.ids = ids
        self.unit = np.ascontiguousarray(unit, dtype=np.float32)
        self.is_claim = np.asarray(is_claim, dtype=bool)
        self.claim_of = claim_of
        self._buffer = _buffer
        self.live = live

    def __len__(self) -> int:
        """Rows, dead ones included (a row keeps its position until a compaction)."""
        return len(self.ids)

    @property
    def n_live(self) -> int:
        return len(self.ids) if self.live is None else int(self.live.sum())

    def live_rows(self) -> np.ndarray:
        """Positions of the live rows."""
        return np.arange(len(self.ids)) if self.live is None else np.flatnonzero(self.live)

    def compacted(self) -> ClusterGroup:
        """This group without its dead rows (itself when it has none)."""
        if self.live is None:
            return self
        return self.copy_without(set(np.flatnonzero(~self.live).tolist()))

    def extended(self, other: ClusterGroup) -> ClusterGroup:
        """This group with ``other``'s members appended.

        The vectors go into spare rows of this group's buffer when this group is its latest snapshot (O(len(other))
        then); otherwise into a new buffer with room to grow (an eighth more), so appends are amortised O(batch).
        """
        other = other.compacted()
        n, m = len(self), len(other)
        buffer = self._buffer
        if buffer is None or buffer.used != n or buffer.rows.shape[0] < n + m:
            buffer = GrowthBuffer(np.empty((n + max(m, n // 8), self.unit.shape[1]), dtype=np.float32))
            buffer.rows[:n] = self.unit
        buffer.rows[n : n + m] = other.unit
        buffer.used = n + m
        live = None if self.live is None else np.concatenate([self.live, np.ones(m, dtype=bool)])
        return ClusterGroup(
            self.ids + other.ids,
            buffer.rows[: n + m],
            np.concatenate([self.is_claim, other.is_claim]),
            self.claim_of + other.claim_of,
            buffer,
            live,
        )

    def without(self, positions: set[int]) -> tuple[ClusterGroup, bool]:
        """This group without the members at ``positions``, and whether its rows moved (a compaction).

        The rows are marked dead (O(len(positions)) beside one flag per row), unless the dead rows would then
        be more than :data:`COMPACT_DEAD` of the rows: the live rows are then copied, with room to grow.
        """
        live = np.ones(len(self), dtype=bool) if self.live is None else self.live.copy()
        live[np.fromiter(positions, dtype=np.int64, count=len(positions))] = False
        if len(self) - int(live.sum()) <= COMPACT_DEAD * len(self):
            return ClusterGroup(self.ids, self.unit, self.is_claim, self.claim_of, self._buffer, live), False
        return self.copy_without(set(np.flatnonzero(~live).tolist())), True

    def copy_without(self, positions: set[int]) -> ClusterGroup:
        """A copy of this group without the rows at ``positions``, with room to grow."""
        keep = np.ones(len(self), dtype=bool)
        keep[np.fromiter(positions, dtype=np.int64, count=len(positions))] = False
        flags = keep.tolist()
        kept = len(self) - len(positions)
        growth = GrowthBuffer(np.empty((kept + growth_rows(kept), self.unit.shape[1]), np.float32), used=kept)
        at = 0  # the runs between removed rows, copied as blocks (faster than a mask); with room for inserts
        start = 0
        for gone in [*sorted(positions), len(self)]:
            growth.rows[at : at + gone - start] = self.unit[start:gone]
            at += gone - start
            start = gone + 1
        return ClusterGroup(
            [x for x, k in zip(self.ids, flags) if k],
            growth.rows[:kept],
            self.is_claim[keep],
            [x for x, k in zip(self.claim_of, flags) if k],
            growth,
        )


class GrowthBuffer:
    """Rows a cluster's successive snapshots append into; ``used``: rows the latest snapshot holds."""

    __slots__ = ("rows", "used")

    def __init__(self, rows: np.ndarray, *, used: int = 0) -> None:
        self.rows = rows
        self.used = used


class MemoryClusters:
    """An immutable snapshot of the clusters' members.

    Args:
        groups: ``{(theme, cluster): ClusterGroup}``; empty groups are dropped.
        dim: the vectors' dimension.
    """

    def __init__(
        self,
        groups: Mapping[GroupKey, ClusterGroup],
        dim: int,
        *,
        _where: dict[str, tuple[GroupKey, int]] | None = None,
        _rows: Mapping[GroupKey, np.ndarray] | None = None,
    ) -> None:
        self.dim = dim
        self.groups: dict[GroupKey, ClusterGroup] = {k: g for k, g in groups.items() if g.n_live}
        #: ``{id: ((theme, cluster), slot)}``: a member keeps its slot while others are deleted, so an edit
        #: derives this map from the last snapshot's by adding and deleting only the ids it changed (``_where``)
        self.where: dict[str, tuple[GroupKey, int]] = (
            _where
            if _where is not None
            else {
                group.ids[pos]: (key, pos) for key, group in self.groups.items() for pos in group.live_rows().tolist()
            }
        )
        #: ``{key: row of each slot (-1: deleted)}`` of the clusters a delete has shifted; elsewhere slot == row
        self.rows: dict[GroupKey, np.ndarray] = {k: r for k, r in (_rows or {}).items() if k in self.groups}

    # ---------------------------------------------------------------- reading
    def __contains__(self, node_id: object) -> bool:
        return node_id in self.where

    def __len__(self) -> int:
        return len(self.where)

    def keys(self) -> list[GroupKey]:
        return list(self.groups)

    def size(self, key: GroupKey) -> int:
        group = self.groups.get(key)
        return 0 if group is None else group.n_live

    def group(self, key: GroupKey) -> ClusterGroup | None:
        return self.groups.get(key)

    def key_of(self, node_id: str) -> GroupKey | None:
        """``(theme, cluster)`` of a member, or ``None``."""
        found = self.where.get(node_id)
        return None if found is None else found[0]

    def row_of(self, node_id: str) -> tuple[GroupKey, int] | None:
        """``((theme, cluster), row)`` of a member in its cluster's arrays, or ``None``."""
        found = self.where.get(node_id)
        if found is None:
            return None
        key, slot = found
        rows = self.rows.get(key)
        return found if rows is None else (key, int(rows[slot]))

    def unit_vector(self, node_id: str) -> np.ndarray | None:
        found = self.row_of(node_id)
        if found is None:
            return None
        key, pos = found
        return self.groups[key].unit[pos]

    def members(
        self, key: GroupKey, texts: Callable[[Sequence[str]], Sequence[str]] | None = None, *, with_dead: bool = False
    ) -> ClusterMembers:
        """The members of ``key``; ``texts(ids)`` gives their texts, if asked.

        Views (no copies) when the cluster has no dead rows or ``with_dead`` (the SOI's scan: dead rows
        flagged in ``live``); otherwise a copy of the live rows.
        """
        group = self.groups.get(key)
        if group is None:
            return ClusterMembers([], [] if texts else None, np.zeros((0, self.dim), np.float32), np.zeros(0, bool), [])
        if not with_dead:
            group = group.compacted()
        return ClusterMembers(
            group.ids,
            None if texts is None else texts(group.ids),
            group.unit,
            group.is_claim,
            group.claim_of,
            group.live,
        )

    def evidence_units(self) -> tuple[list[str], np.ndarray]:
        """Ids and unit vectors of the evidence members, cluster by cluster (one new matrix)."""
        ids: list[str] = []
        blocks: list[np.ndarray] = []
        for block_ids, units in self.evidence_blocks():
            ids += block_ids
            blocks.append(units)
        return ids, (np.vstack(blocks) if blocks else np.zeros((0, self.dim), np.float32))

    def evidence_blocks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        """``(ids, unit vectors of shape (k, d))`` of each cluster's evidence; a view of the cluster's block
        when its evidence comes first (as a fit lays it out), a copy of that cluster's rows otherwise."""
        for group in self.groups.values():
            rows = np.flatnonzero(~group.is_claim if group.live is None else ~group.is_claim & group.live)
            if not rows.size:
                continue
            prefix = rows[-1] == rows.size - 1
            yield [group.ids[r] for r in rows], (group.unit[: rows.size] if prefix else group.unit[rows])

    def iter_items(self) -> Iterator[tuple[str, GroupKey]]:
        """Every member with its ``(theme, cluster)``, cluster by cluster in row order."""
        return ((group.ids[r], key) for key, group in self.groups.items() for r in group.live_rows().tolist())

    # ---------------------------------------------------------------- writing
    def with_added(self, added: Mapping[GroupKey, ClusterGroup]) -> MemoryClusters:
        """A new snapshot with ``added``'s members appended to their clusters."""
        groups = dict(self.groups)
        where = dict(self.where)  # a copy at C speed; only the appended members are new entries
        rows = dict(self.rows)
        for key, group in added.items():
            old = groups.get(key)
            start = 0 if old is None else len(old)
            groups[key] = group if old is None else old.extended(group)
            shifted = rows.get(key) if old is not None else None
            slot = start if shifted is None else len(shifted)  # appended rows get the next slots
            if shifted is not None:
                rows[key] = np.concatenate([shifted, np.arange(start, start + len(group), dtype=np.int64)])
            where.update(zip(group.ids, zip(repeat(key), range(slot, slot + len(group)))))
        return MemoryClusters(groups, self.dim, _where=where, _rows=rows)

    def without(self, node_ids: Iterable[str]) -> tuple[MemoryClusters, list[tuple[str, str | None]]]:
        """A new snapshot without ``node_ids`` (unknown ids ignored), and the removed ``(id, claim_of)`` of claims.

        Returns ``(self, [])`` when nothing was removed.
        """
        by_group: dict[GroupKey, dict[int, int]] = {}  # {key: {row: slot}}
        for node_id in node_ids:
            found = self.where.get(node_id)
            if found is not None:
                key, slot = found
                shifted = self.rows.get(key)
                by_group.setdefault(key, {})[slot if shifted is None else int(shifted[slot])] = slot
        if not by_group:
            return self, []
        groups = dict(self.groups)
        where = dict(self.where)  # the kept members keep their slots: only the removed ids are deleted
        rows = dict(self.rows)
        claims: list[tuple[str, str | None]] = []
        for key, removed in by_group.items():
            group = groups[key]
            positions = set(removed)
            claims += [(group.ids[p], group.claim_of[p]) for p in positions if group.is_claim[p]]
            for p in positions:
                del where[group.ids[p]]
            groups[key], moved = group.without(positions)
            if not moved:  # rows marked dead: every other row stays where it was
                continue
            dead = np.flatnonzero(~group.live) if group.live is not None else np.zeros(0, np.int64)
            gone = np.union1d(dead, np.fromiter(positions, np.int64))  # every row the compaction dropped
            shifted = rows.get(key)
            slot_rows = np.arange(len(group), dtype=np.int64) if shifted is None else shifted.copy()
            alive = slot_rows >= 0
            slot_rows[alive] -= np.searchsorted(gone, slot_rows[alive])
            slot_rows[np.fromiter(removed.values(), np.int64)] = -1
            rows[key] = slot_rows
        return MemoryClusters(groups, self.dim, _where=where, _rows=rows), claims

    # ------------------------------------------------------------------ state
    def get_state(self) -> list[dict[str, Any]]:
        """JSON-safe description of every group's live members, without vectors."""
        out = []
        for key, group in self.groups.items():
            rows = group.live_rows().tolist()
            dead = group.live is not None
            out.append(
                {
                    "theme": key[0],
                    "cluster": key[1],
                    "ids": [group.ids[r] for r in rows] if dead else group.ids,
                    "is_claim": group.is_claim[rows].astype(int).tolist(),
                    "claim_of": [group.claim_of[r] for r in rows] if dead else group.claim_of,
                }
            )
        return out

    @classmethod
    def from_state(
        cls, groups: Sequence[Mapping[str, Any]], dim: int, unit_vectors: Callable[[list[str]], np.ndarray]
    ) -> MemoryClusters:
        """Rebuild from :meth:`get_state`; ``unit_vectors(ids)`` gives their unit vectors, shape ``(len(ids), dim)``."""
        out: dict[GroupKey, ClusterGroup] = {}
        for g in groups:
            ids = [str(x) for x in g["ids"]]
            unit = unit_vectors(ids)
            if unit.shape != (len(ids), dim):
                raise ValueError(f"Stored embeddings have shape {unit.shape}; expected ({len(ids)}, {dim}).")
            growth = GrowthBuffer(np.empty((len(ids) + growth_rows(len(ids)), dim), np.float32), used=len(ids))
            growth.rows[: len(ids)] = unit  # with the room a fit leaves: a later insert appends in place
            del unit
            out[(g["theme"], int(g["cluster"]))] = ClusterGroup(
                ids, growth.rows[: len(ids)], np.asarray(g["is_claim"], dtype=bool), list(g["claim_of"]), growth
            )
        return cls(out, dim)


class ClusterStore(Protocol):
    """Where a fitted :class:`~llama_index_carag.core.context.ThematicContext` keeps its cluster members.

    Three adapters implement it: :class:`MemoryClusterStore` (every member's unit vector
    in memory), :class:`~llama_index_carag.core.row_clusters.RowClusterStore` (evidence read in place from
    a FAISS flat store's rows, claims in memory) and
    :class:`~llama_index_carag.stores.qdrant_clusters.QdrantClusterStore` (evidence clusters in a Qdrant
    collection's payloads, claims in memory).  The context holds one
    and never looks inside it.  ``texts`` arguments map member ids to their texts (or are
    ``None`` when no texts are wanted).
    """

    def __len__(self) -> int: ...  # items clustered: evidence and claims

    def __contains__(self, node_id: object) -> bool: ...

    def keys(self) -> list[GroupKey]:
        """``(theme, cluster)`` of the non-empty clusters."""

    def size(self, key: GroupKey) -> int:
        """Members of one cluster (evidence and claims)."""

    def key_of(self, node_id: str) -> GroupKey | None:
        """``(theme, cluster)`` of a member, or ``None``."""

    def vectors_and_clusters(self, node_ids: Sequence[str]) -> tuple[list[np.ndarray | None], list[int | None]]:
        """Unit vectors (shape ``(d,)``) and clusters of several nodes (``None`` for unknown ones)."""

    def members(self, key: GroupKey, texts: TextsOf | None) -> ClusterMembers:
        """Every member of one cluster."""

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
        """The members an SOI of a unit query vector (shape ``(d,)``) is built from (at least those above
        ``delta``, and the ``min_size`` most similar).  ``nearest``: the vector store's hits for the query's
        own vector, when its dense search ran first (a store that reads the vector store's rows may build the
        members from them instead of scanning the cluster; the others ignore it)."""

    def cluster_size(self, key: GroupKey, claim_id: str | None, core: SOICore) -> int:
        """The cluster size an SOI reports."""

    def add(self, groups: Mapping[GroupKey, ClusterGroup], themes: Mapping[str, str]) -> list[tuple[str, str | None]]:
        """Add members by cluster (ids already present are replaced); ``themes``: ids whose theme was assigned.

        Returns the ``(id, claim_of)`` of the claims that were replaced.
        """

    def remove(self, node_ids: Sequence[str]) -> tuple[int, list[tuple[str, str | None]]]:
        """Drop members (unknown ids ignored): how many went, and the ``(id, claim_of)`` of removed claims."""

    def iter_items(self) -> Iterator[tuple[str, GroupKey]]:
        """``(node_id, (theme, cluster))`` of every member."""

    def evidence_units(self) -> tuple[list[str], np.ndarray]:
        """Ids and unit vectors (shape ``(n, d)``) of the evidence held in memory."""

    def evidence_blocks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        """The same evidence cluster by cluster, ``(ids, unit vectors of shape (k, d))``, without one big copy."""

    def get_state(self) -> dict[str, Any]:
        """JSON-safe description (no vectors), merged into the context's state."""


class MemoryClusterStore:
    """:class:`ClusterStore` over one :class:`MemoryClusters` snapshot, replaced (never changed) by each write.

    Writers run under the context's lock; a reader takes ``self.clusters`` once and
    reads a consistent view.
    """

    def __init__(self, clusters: MemoryClusters) -> None:
        self.clusters = clusters

    def __len__(self) -> int:
        return len(self.clusters)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.clusters

    def keys(self) -> list[GroupKey]:
        return self.clusters.keys()

    def size(self, key: GroupKey) -> int:
        return self.clusters.size(key)

    def key_of(self, node_id: str) -> GroupKey | None:
        return self.clusters.key_of(node_id)

    def vectors_and_clusters(self, node_ids: Sequence[str]) -> tuple[list[np.ndarray | None], list[int | None]]:
        clusters = self.clusters  # one snapshot: position and group always agree
        found = [clusters.row_of(i) for i in node_ids]
        vectors = [None if f is None else clusters.groups[f[0]].unit[f[1]] for f in found]
        return vectors, [None if f is None else f[0][1] for f in found]

    def members(self, key: GroupKey, texts: TextsOf | None) -> ClusterMembers:
        return self.clusters.members(key, texts)

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
        return self.clusters.members(key, texts, with_dead=True)  # the whole cluster: the SOI builder filters it

    def cluster_size(self, key: GroupKey, claim_id: str | None, core: SOICore) -> int:
        return core.cluster_size

    def add(self, groups: Mapping[GroupKey, ClusterGroup], themes: Mapping[str, str]) -> list[tuple[str, str | None]]:
        kept, replaced = self.clusters.without([i for g in groups.values() for i in g.ids])
        self.clusters = kept.with_added(groups)
        return replaced

    def remove(self, node_ids: Sequence[str]) -> tuple[int, list[tuple[str, str | None]]]:
        before = self.clusters
        after, claims = before.without(node_ids)
        self.clusters = after
        return len(before) - len(after), claims

    def iter_items(self) -> Iterator[tuple[str, GroupKey]]:
        return self.clusters.iter_items()

    def evidence_units(self) -> tuple[list[str], np.ndarray]:
        return self.clusters.evidence_units()

    def evidence_blocks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        return self.clusters.evidence_blocks()

    def get_state(self) -> dict[str, Any]:
        return {"groups": self.clusters.get_state()}

    @classmethod
    def from_state(
        cls, info: Mapping[str, Any], dim: int, unit_vectors: Callable[[list[str]], np.ndarray]
    ) -> MemoryClusterStore:
        """Rebuild from :meth:`get_state`; ``unit_vectors(ids)``: their unit vectors, shape ``(len(ids), dim)``."""
        return cls(MemoryClusters.from_state(info["groups"], dim, unit_vectors))
