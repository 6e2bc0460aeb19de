"""What the re-ranking stage works on: one query and its pool of candidates."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llama_index.core.schema import BaseNode, NodeWithScore

from llama_index_carag.core.vectors import l2_normalize


@dataclass(frozen=True)
class RankQuery:
    """A query as the scorers see it (vectors already checked and normalised).

    Attributes:
        query_str: the claim text.
        unit: the claim as a unit vector, shape ``(d,)``.
        theme_unit: the thematic embedding ``T`` as a unit vector, or ``None`` (empty SOI).
        kinds: ``{node id: SOI key}`` of the SOI items.
        soi_size: number of SOI items.
        soi_filled: how many of them ``soi_min_size`` added below ``delta``; the thematic term weighs
            ``(1 - alpha) * (soi_size - soi_filled) / soi_size``.
        query_cluster, query_theme: where the query was located.
        claim_id: the corpus claim the query is, if any.
        mode: ``"unsupervised"`` or ``"supervised"``.
    """

    query_str: str
    unit: np.ndarray
    theme_unit: np.ndarray | None
    kinds: dict[str, str]
    soi_size: int
    query_cluster: int | None
    query_theme: str | None
    claim_id: str | None
    mode: str
    soi_filled: int = 0

    @property
    def fallback(self) -> bool:
        """True when the SOI is empty and the claim vector is used alone."""
        return self.theme_unit is None

    @property
    def theme_support(self) -> float:
        """The share of the SOI's items not added by ``soi_min_size`` (1 under the papers' rule; 0 when empty)."""
        if self.theme_unit is None or self.soi_size == 0:
            return 0.0
        return 1.0 - self.soi_filled / self.soi_size


@dataclass
class CandidatePool:
    """The candidates of one query, as parallel arrays.

    Attributes:
        ids: node ids, length ``n`` (unique).
        units: their unit vectors, shape ``(n, d)`` float32 (zero rows where unknown).
        known: shape ``(n,)`` bool, False where no vector is known (such a candidate sorts last).
        clusters: each candidate's cluster (``None`` when not clustered).
        nodes: the retrieved ``NodeWithScore`` objects (score = the source's own score).
        columns: named per-candidate float columns, shape ``(n,)`` each: ``dense`` (cosine to
            the query) always; a candidate source may add its own (``lexical``, ``rrf``, …).
    """

    ids: list[str]
    units: np.ndarray
    known: np.ndarray
    clusters: list[int | None]
    nodes: list[NodeWithScore | None]
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    loader: Callable[[list[str]], list[BaseNode | None]] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_ids(
        cls,
        ids: Sequence[str],
        query_unit: np.ndarray,
        lookup: Callable[[list[str]], tuple[list[np.ndarray | None], list[int | None]]],
        loader: Callable[[list[str]], list[BaseNode | None]],
    ) -> CandidatePool:
        """A pool of node ids (first occurrence wins) whose nodes are loaded only when asked for
        (:meth:`prefetch` / :meth:`node_at`) — re-ranking 100 candidates then reads ~k nodes, not 100."""
        unique = list(dict.fromkeys(ids))
        vectors, clusters = lookup(unique) if unique else ([], [])
        units = np.zeros((len(unique), query_unit.shape[0]), dtype=np.float32)
        known = np.array([v is not None for v in vectors], dtype=bool)
        for i, vector in enumerate(vectors):
            if vector is not None:
                units[i] = vector
        pool = cls(unique, units, known, list(clusters), [None] * len(unique), loader=loader)
        pool.columns["dense"] = pool.similarity(query_unit)
        return pool

    def prefetch(self, rows: Sequence[int]) -> None:
        """Load the nodes of ``rows`` that are not loaded yet, in one call of the loader."""
        missing = [r for r in rows if self.nodes[r] is None]
        if missing and self.loader is not None:
            for r, node in zip(missing, self.loader([self.ids[r] for r in missing])):
                if node is not None:
                    self.nodes[r] = NodeWithScore(node=node, score=None)

    def node_at(self, row: int) -> BaseNode | None:
        """The node of a candidate (loaded on demand; ``None`` when the store has no such node)."""
        if self.nodes[row] is None:
            self.prefetch([row])
        hit = self.nodes[row]
        return None if hit is None else hit.node

    @classmethod
    def build(
        cls,
        hits: Sequence[NodeWithScore],
        query_unit: np.ndarray,
        lookup: Callable[[list[str]], tuple[list[np.ndarray | None], list[int | None]]],
    ) -> CandidatePool:
        """A pool from hits (first occurrence of an id wins), vectors and clusters from ``lookup``.

        A hit whose vector ``lookup`` does not know uses its node's own embedding, if any.
        """
        seen: set[str] = set()
        nodes = []
        for hit in hits:
            if hit.node.node_id not in seen:
                seen.add(hit.node.node_id)
                nodes.append(hit)
        ids = [n.node.node_id for n in nodes]
        vectors, clusters = lookup(ids) if ids else ([], [])
        dim = query_unit.shape[0]
        units = np.zeros((len(ids), dim), dtype=np.float32)
        known = np.zeros(len(ids), dtype=bool)
        for i, (hit, vector) in enumerate(zip(nodes, vectors)):
            if vector is None and hit.node.embedding is not None:
                vector = l2_normalize(np.asarray(hit.node.embedding, dtype=np.float32))
            if vector is not None:
                units[i] = vector
                known[i] = True
        pool = cls(ids, units, known, list(clusters), list(nodes))
        pool.columns["dense"] = pool.similarity(query_unit)
        return pool

    def similarity(self, unit: np.ndarray) -> np.ndarray:
        """Cosine of every candidate to a unit vector, shape ``(n,)`` (0 where unknown)."""
        if not len(self.ids):
            return np.zeros(0, dtype=np.float32)
        # einsum, not BLAS: it never wakes BLAS's worker threads, which would slow the next vector search.
        return np.einsum("ij,j->i", self.units, unit)

    def vectors(self) -> list[np.ndarray | None]:
        """Per-candidate unit vectors (``None`` where unknown)."""
        return [self.units[i] if self.known[i] else None for i in range(len(self.ids))]

    def source_scores(self) -> list[Any]:
        """The scores the candidate sources gave (``None`` for a pool built from ids)."""
        return [None if n is None else n.score for n in self.nodes]
