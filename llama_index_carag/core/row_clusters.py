"""Clusters whose evidence vectors stay in the vector store: :class:`RowClusterStore`.

The :class:`~llama_index_carag.core.cluster_store.ClusterStore` adapter for a store that lends its rows
(:class:`~llama_index_carag.core.store_rows.StoreRows`: FAISS flat).  Each cluster keeps its evidence as
ids, store keys and row norms (12 bytes and an id a passage, not ``4·d`` bytes); the claims, which are not
evidence in the store, stay in a :class:`~llama_index_carag.core.cluster_store.MemoryClusterStore`.

An SOI query scans its cluster in the store's matrix by row (:meth:`StoreRows.inner_products`) and hands the
SOI builder the rows it can keep (as the Qdrant store does): those above ``delta`` and the ``min_size`` most
similar, with a margin of :data:`MARGIN` so that the builder's own cosines, computed again on those rows'
unit vectors, decide.  Supervised SOIs with a ``min_size`` get the whole cluster (which rows may fill depends
on the claim links the builder reads).  When the query's dense search ran first, its hits
(:class:`~llama_index_carag.core.store_rows.StoreHits`) often prove which rows those are, and the cluster is
not scanned at all (:meth:`RowClusterStore._hit_members`).

A snapshot (:class:`RowClusters`) never changes: a write builds a new one; a query that finds the store at
another version than its snapshot (rows added or removed) maps the keys to rows again, once.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import compress
from typing import Any

import numpy as np

from llama_index_carag.core.cluster_store import ClusterGroup, GroupKey, MemoryClusters, MemoryClusterStore, TextsOf
from llama_index_carag.core.soi import ClusterMembers, SOICore
from llama_index_carag.core.store_rows import StoreHits, StoreRows
from llama_index_carag.core.vectors import row_norms

#: Cosines within this of a cut (``delta``, or the ``min_size``-th highest) are handed to the SOI builder too.
MARGIN = 1e-4
#: Rows gathered at a time when a whole cluster's unit vectors are read.
_BLOCK = 16_384


@dataclass(frozen=True)
class RowGroup:
    """The evidence of one cluster: node ids, store keys (int64), row norms (float32) and claim links."""

    ids: list[str]
    keys: np.ndarray
    norms: np.ndarray
    claim_of: list[str | None]

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def norm_range(self) -> tuple[float, float]:
        """The smallest and largest row norm (once per group: a group never changes)."""
        return (float(self.norms.min()), float(self.norms.max())) if len(self.norms) else (0.0, 0.0)

    def kept(self, keep: np.ndarray) -> RowGroup:
        """The members where ``keep`` (one flag a member) is true."""
        flags = keep.tolist()
        return RowGroup(
            list(compress(self.ids, flags)), self.keys[keep], self.norms[keep], list(compress(self.claim_of, flags))
        )

    def extended(self, other: RowGroup) -> RowGroup:
        return RowGroup(
            self.ids + other.ids,
            np.concatenate([self.keys, other.keys]),
            np.concatenate([self.norms, other.norms]),
            self.claim_of + other.claim_of,
        )


@dataclass(frozen=True)
class RowClusters:
    """An immutable snapshot: ``groups`` of evidence, ``where`` (id → its cluster and key, one int: see
    :meth:`locate`), the rows of each group's keys at store ``version``, and ``names`` (a cluster's number in
    ``where`` → its key; append-only)."""

    groups: dict[GroupKey, RowGroup]
    where: dict[str, int]
    rows: dict[GroupKey, np.ndarray]
    version: Hashable
    names: tuple[GroupKey, ...]

    @classmethod
    def of_groups(cls, groups: Mapping[GroupKey, RowGroup], store: StoreRows) -> RowClusters:
        kept = {k: g for k, g in groups.items() if len(g)}
        names = tuple(kept)
        where = {i: code for n, g in enumerate(kept.values()) for i, code in zip(g.ids, _codes(g.keys, n))}
        return cls(kept, where, {k: store.rows_of(g.keys) for k, g in kept.items()}, store.version(), names)

    def locate(self, node_id: str) -> tuple[GroupKey, int] | None:
        """``(cluster, store key)`` of a member, or ``None``."""
        code = self.where.get(node_id)
        return None if code is None else (self.names[code & _GROUP_MASK], code >> _GROUP_BITS)

    def at(self, store: StoreRows) -> RowClusters:
        """This snapshot with its rows at the store's current version (itself when it is current)."""
        version = store.version()
        if version == self.version:
            return self
        rows = {k: store.rows_of(g.keys, self.rows.get(k)) for k, g in self.groups.items()}
        return replace(self, rows=rows, version=version)


#: ``where`` packs a member's cluster number and store key into one int (one object a passage, not a tuple).
_GROUP_BITS = 20
_GROUP_MASK = (1 << _GROUP_BITS) - 1


def _codes(keys: np.ndarray, number: int) -> list[int]:
    return ((keys << _GROUP_BITS) | number).tolist()


class RowClusterStore:
    """:class:`~llama_index_carag.core.cluster_store.ClusterStore` over a store's lent rows (see the module).

    Args:
        store: the lending store.
        clusters: the evidence snapshot.
        claims: the claims, in memory.
        supervised: CARAG (a cluster's size counts the other claims; ``min_size`` fills from the whole cluster).
    """

    def __init__(
        self, store: StoreRows, clusters: RowClusters, claims: MemoryClusterStore, *, supervised: bool
    ) -> None:
        self.store = store
        self.clusters = clusters
        self.claims = claims
        self.supervised = supervised
        self.dim = store.dim
        self._publish = threading.Lock()  # a query's refresh and a writer's snapshot, one at a time

    @classmethod
    def from_groups(
        cls,
        store: StoreRows,
        evidence: Mapping[GroupKey, RowGroup],
        claims: Mapping[GroupKey, ClusterGroup],
        *,
        supervised: bool,
    ) -> RowClusterStore:
        return cls(
            store,
            RowClusters.of_groups(evidence, store),
            MemoryClusterStore(MemoryClusters(claims, store.dim)),
            supervised=supervised,
        )

    def _current(self) -> RowClusters:
        """The snapshot with rows valid at the store's current version (mapped again once after a store write)."""
        clusters = self.clusters
        if clusters.version == self.store.version():
            return clusters
        with self._publish:
            clusters = self.clusters = self.clusters.at(self.store)
        return clusters

    def _published(self, clusters: RowClusters) -> None:
        """Make ``clusters`` the snapshot queries read (a writer's; never lost to a query's refresh)."""
        with self._publish:
            self.clusters = clusters

    # ---------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self.clusters.where) + len(self.claims)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.clusters.where or node_id in self.claims

    def keys(self) -> list[GroupKey]:
        return list(dict.fromkeys([*self.clusters.groups, *self.claims.keys()]))

    def size(self, key: GroupKey) -> int:
        group = self.clusters.groups.get(key)
        return (0 if group is None else len(group)) + self.claims.size(key)

    def key_of(self, node_id: str) -> GroupKey | None:
        found = self.clusters.locate(node_id)
        return found[0] if found is not None else self.claims.key_of(node_id)

    def _unit(self, rows: np.ndarray, norms: np.ndarray) -> np.ndarray:
        """Unit vectors of store ``rows`` (norms given), ``(len(rows), d)``; a row ``-1`` (gone) gives zeros."""
        matrix = self.store.matrix()
        out = np.zeros((len(rows), self.dim), dtype=np.float32)
        for start in range(0, len(rows), _BLOCK):
            part = rows[start : start + _BLOCK]
            ok = part >= 0
            block = matrix[part[ok]]
            block /= norms[start : start + _BLOCK][ok, None]
            out[start : start + _BLOCK][ok] = block
        return out

    def vectors_and_clusters(self, node_ids: Sequence[str]) -> tuple[list[np.ndarray | None], list[int | None]]:
        vectors, clusters = self.claims.vectors_and_clusters(node_ids)
        snapshot = self._current()
        located = [(r, snapshot.locate(i)) for r, i in enumerate(node_ids) if vectors[r] is None]
        found = [(r, at) for r, at in located if at is not None]
        if found:
            rows = self.store.rows_of(np.fromiter((k for _, (_, k) in found), np.int64, count=len(found)))
            matrix = self.store.matrix()
            live = rows >= 0
            x = matrix[rows[live]]
            unit = x / row_norms(x)[:, None]  # the norms the fit stored: same rows, same sums
            for (r, (key, _)), u in zip([f for f, ok in zip(found, live.tolist()) if ok], unit):
                vectors[r] = u
                clusters[r] = key[1]
        return vectors, clusters

    def members(self, key: GroupKey, texts: TextsOf | None) -> ClusterMembers:
        """Every member of a cluster (unit vectors gathered from the store: for drawing and checks, not queries)."""
        snapshot = self._current()
        group = snapshot.groups.get(key)
        if group is None:
            return self.claims.members(key, texts)
        return self._with_claims(key, group, snapshot.rows[key], np.arange(len(group)), texts)

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
        """The cluster's evidence an SOI can keep (see the module docstring), then its claims; read from
        ``nearest`` when they prove it holds them all (:meth:`_hit_members`), else from a scan of the cluster."""
        snapshot = self._current()
        group = snapshot.groups.get(key)
        if group is None:
            return self.claims.members(key, texts)
        rows = snapshot.rows[key]
        if self.supervised and min_size > 0:
            return self._with_claims(key, group, rows, np.arange(len(group)), texts)
        if nearest is not None and self.store.bounds_rows(nearest):
            take = self._hit_members(snapshot, key, nearest, delta, min_size)
            if take is not None:
                return self._with_claims(key, group, rows, take, texts)
        sims = self.store.inner_products(rows, query_unit) / group.norms
        floor = float(delta) - MARGIN
        if min_size > 0 and int(np.count_nonzero(sims > floor)) < min_size:
            m = min(min_size, len(sims))
            floor = min(floor, float(np.partition(sims, len(sims) - m)[len(sims) - m]) - MARGIN)
        return self._with_claims(key, group, rows, np.flatnonzero(sims > floor), texts)

    @staticmethod
    def _hit_members(
        snapshot: RowClusters, key: GroupKey, nearest: StoreHits, delta: float, min_size: int
    ) -> np.ndarray | None:
        """The positions in cluster ``key`` that a scan would keep (ascending), taken from the store's hits for the
        query; ``None`` when the hits cannot prove that no other member passes the cut.

        A member that is not a hit scores at most ``nearest.bound``, so its cosine is at most that over the
        query's and the member's norms.  When that stays below the cut (``delta``, or the ``min_size``-th highest
        cosine among the hits, less :data:`MARGIN` as in the scan), the hits hold every member the scan keeps.
        """
        group = snapshot.groups[key]
        number = snapshot.names.index(key)
        picked: list[int] = []
        keys: list[int] = []
        for h, node_id in enumerate(nearest.ids):
            code = snapshot.where.get(node_id)
            if code is not None and code & _GROUP_MASK == number:
                picked.append(h)
                keys.append(code >> _GROUP_BITS)
        found = np.asarray(keys, dtype=np.int64)
        pos = np.searchsorted(group.keys, found)
        if len(pos) and (pos.max() >= len(group) or not np.array_equal(group.keys[pos], found)):
            return None  # keys out of order (never after a fit, an insert or a delete): scan
        sims = nearest.scores[picked].astype(np.float64) / (nearest.query_norm * group.norms[pos])
        floor = float(delta) - MARGIN
        if min_size > 0 and int(np.count_nonzero(sims > floor)) < min_size:
            m = min(min_size, len(group))
            if len(sims) < m:
                return None
            floor = min(floor, float(np.partition(sims, len(sims) - m)[len(sims) - m]) - MARGIN)
        bound = nearest.bound
        if bound > float("-inf"):
            norm = group.norm_range[0] if bound > 0 else group.norm_range[1]
            if norm <= 0 or not bound / (nearest.query_norm * norm) < floor:
                return None
        return np.sort(pos[sims > floor])

    def _with_claims(
        self, key: GroupKey, group: RowGroup, rows: np.ndarray, take: np.ndarray, texts: TextsOf | None
    ) -> ClusterMembers:
        """Evidence rows ``take`` of ``group`` (ascending) followed by the cluster's claims, as members."""
        taken = rows[take]
        live = taken >= 0
        ids = [group.ids[t] for t in take.tolist()]
        claim_of = [group.claim_of[t] for t in take.tolist()]
        unit = self._unit(taken, group.norms[take])
        claims = self.claims.clusters.group(key)
        flags = None if live.all() else live
        if claims is not None:
            ids += claims.ids
            claim_of += claims.claim_of
            unit = np.vstack([unit, claims.unit])
            if flags is not None or claims.live is not None:
                flags = np.concatenate([live, np.ones(len(claims), bool) if claims.live is None else claims.live])
        is_claim = np.zeros(len(ids), dtype=bool)
        is_claim[len(take) :] = True
        return ClusterMembers(ids, None if texts is None else texts(ids), unit, is_claim, claim_of, flags)

    def cluster_size(self, key: GroupKey, claim_id: str | None, core: SOICore) -> int:
        snapshot = self._current()
        group = snapshot.groups.get(key)
        evidence = 0 if group is None else int(np.count_nonzero(snapshot.rows[key] >= 0))
        if not self.supervised:
            return evidence
        claims = self.claims.clusters.group(key)
        others = 0 if claims is None else sum(1 for r in claims.live_rows().tolist() if claims.claim_of[r] != claim_id)
        return evidence + others

    def iter_items(self) -> Iterator[tuple[str, GroupKey]]:
        for key, group in self.clusters.groups.items():
            for node_id in group.ids:
                yield node_id, key
        yield from self.claims.iter_items()

    def evidence_blocks(self) -> Iterator[tuple[list[str], np.ndarray]]:
        """The evidence cluster by cluster, ``(ids, unit vectors)``, gathered from the store at most
        :data:`_BLOCK` rows at a time (a large cluster comes in several blocks)."""
        snapshot = self._current()
        for key, group in snapshot.groups.items():
            rows = snapshot.rows[key]
            for start in range(0, len(group), _BLOCK):
                stop = start + _BLOCK
                yield group.ids[start:stop], self._unit(rows[start:stop], group.norms[start:stop])

    def evidence_units(self) -> tuple[list[str], np.ndarray]:
        ids: list[str] = []
        blocks: list[np.ndarray] = []
        for block_ids, units in self.evidence_blocks():
            ids += block_ids
            blocks.append(units)
        return ids, (np.vstack(blocks) if blocks else np.zeros((0, self.dim), np.float32))

    # ---------------------------------------------------------------- writing
    def add(self, groups: Mapping[GroupKey, ClusterGroup], themes: Mapping[str, str]) -> list[tuple[str, str | None]]:
        """Add members by cluster: evidence (already in the store) by key, claims in memory; ids already present
        are replaced."""
        _, replaced = self.remove([i for g in groups.values() for i in g.ids])
        claim_groups: dict[GroupKey, ClusterGroup] = {}
        added: dict[GroupKey, tuple[RowGroup, np.ndarray]] = {}  # the new members and their rows
        for key, group in groups.items():
            evidence = np.flatnonzero(~group.is_claim)
            if evidence.size:
                ids = [group.ids[r] for r in evidence.tolist()]
                keys = self.store.keys_of(ids)
                rows = self.store.rows_of(keys)
                norms = row_norms(self.store.matrix()[rows])
                added[key] = (RowGroup(ids, keys, norms, [group.claim_of[r] for r in evidence.tolist()]), rows)
            if group.is_claim.any():
                claim_groups[key] = group.copy_without(set(evidence.tolist()))
        if added:
            snapshot = self._current()  # its rows are those of the store now: only the new members' are appended
            groups_now = dict(snapshot.groups)
            where = dict(snapshot.where)
            rows_now = dict(snapshot.rows)
            names = list(snapshot.names)
            for key, (extra, extra_rows) in added.items():
                old = groups_now.get(key)
                groups_now[key] = extra if old is None else old.extended(extra)
                rows_now[key] = extra_rows if old is None else np.concatenate([rows_now[key], extra_rows])
                if key not in names:
                    names.append(key)
                where.update(zip(extra.ids, _codes(extra.keys, names.index(key))))
            self._published(RowClusters(groups_now, where, rows_now, self.store.version(), tuple(names)))
        if claim_groups:
            replaced += self.claims.add(claim_groups, themes)
        return replaced

    def remove(self, node_ids: Sequence[str]) -> tuple[int, list[tuple[str, str | None]]]:
        """Drop members (unknown ids ignored): how many went, and the ``(id, claim_of)`` of removed claims."""
        removed, claims = self.claims.remove([i for i in node_ids if i in self.claims])
        snapshot = self.clusters
        by_group: dict[GroupKey, list[int]] = {}
        for node_id in node_ids:
            found = snapshot.locate(node_id)
            if found is not None:
                by_group.setdefault(found[0], []).append(found[1])
        if by_group:
            groups = dict(snapshot.groups)
            where = dict(snapshot.where)  # a copy at C speed; only the removed ids are deleted
            for node_id in node_ids:
                where.pop(node_id, None)
            rows = dict(snapshot.rows)
            gone_rows: list[np.ndarray] = []  # the removed members' rows at the snapshot's version
            for key, keys in by_group.items():
                kept = ~np.isin(groups[key].keys, np.asarray(keys, dtype=np.int64))
                gone_rows.append(rows[key][~kept])
                groups[key] = groups[key].kept(kept)
                rows[key] = rows[key][kept]
                if not len(groups[key]):
                    del groups[key], rows[key]
                removed += len(keys)
            if self.store.version() != snapshot.version:
                # The store removed rows (it compacts in order): if they are exactly these, every other row moved
                # down by the removed rows before it.  ``at`` checks that guess before it searches every key.
                gone = np.sort(np.concatenate(gone_rows))
                gone = gone[gone >= 0]
                rows = {k: np.where(r >= 0, r - np.searchsorted(gone, r), r) for k, r in rows.items()}
            self._published(replace(snapshot, groups=groups, where=where, rows=rows).at(self.store))
        return removed, claims

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, Any]:
        """The same description as :meth:`MemoryClusterStore.get_state` (evidence, then claims, per cluster)."""
        claims = {(g["theme"], g["cluster"]): g for g in self.claims.get_state()["groups"]}
        out = []
        for key in self.keys():
            group = self.clusters.groups.get(key)
            extra = claims.get(key, {"ids": [], "is_claim": [], "claim_of": []})
            ids = [] if group is None else list(group.ids)
            out.append(
                {
                    "theme": key[0],
                    "cluster": key[1],
                    "ids": ids + list(extra["ids"]),
                    "is_claim": [0] * len(ids) + list(extra["is_claim"]),
                    "claim_of": ([] if group is None else list(group.claim_of)) + list(extra["claim_of"]),
                }
            )
        return {"groups": out}

    @classmethod
    def from_state(cls, info: Mapping[str, Any], dim: int, store: StoreRows, claim_vectors: Any) -> RowClusterStore:
        """Rebuild from :meth:`get_state` (or :meth:`MemoryClusterStore.get_state`): evidence by key from the
        store, claims from ``claim_vectors(ids)`` (unit vectors)."""
        if store.dim != dim:
            raise ValueError(f"The vector store holds {store.dim}-d vectors; the state was fitted on {dim}-d.")
        evidence: dict[GroupKey, RowGroup] = {}
        claim_state = []
        for g in info["groups"]:
            key: GroupKey = (g["theme"], int(g["cluster"]))
            flags = [bool(x) for x in g["is_claim"]]
            ids = [str(i) for i, c in zip(g["ids"], flags) if not c]
            if ids:
                keys = store.keys_of(ids)
                rows = store.rows_of(keys)
                norms = np.empty(len(ids), dtype=np.float32)
                matrix = store.matrix()
                for start in range(0, len(ids), _BLOCK):
                    norms[start : start + _BLOCK] = row_norms(matrix[rows[start : start + _BLOCK]])
                evidence[key] = RowGroup(ids, keys, norms, [c for c, f in zip(g["claim_of"], flags) if not f])
            if any(flags):
                claim_state.append(
                    {
                        "theme": g["theme"],
                        "cluster": g["cluster"],
                        "ids": [i for i, c in zip(g["ids"], flags) if c],
                        "is_claim": [1] * sum(flags),
                        "claim_of": [c for c, f in zip(g["claim_of"], flags) if f],
                    }
                )
        claims = MemoryClusterStore.from_state({"groups": claim_state}, dim, claim_vectors)
        return cls(store, RowClusters.of_groups(evidence, store), claims, supervised=info["mode"] == "supervised")
