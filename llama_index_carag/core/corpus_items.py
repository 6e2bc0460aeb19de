"""What a context is fitted on and what a query gets back, as plain data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llama_index_carag.core.cluster_store import GroupKey
from llama_index_carag.core.soi import ClusterMembers, SOICore
from llama_index_carag.core.vectors import as_matrix, l2_normalize


@dataclass
class CorpusItems:
    """Everything clustered, as parallel arrays (evidence and claims together).

    Attributes:
        ids: node ids, length ``n`` (unique).
        vectors: embeddings, shape ``(n, d)`` (normalised internally).
        is_claim: shape ``(n,)`` bool.
        claim_of: evidence → its claim's id (or ``None``); claim → its own id.
        themes: theme of each item, or ``None`` (required by supervised mode).
        claim_texts: claim node id → text (to recognise a query as a corpus
            claim, and to show claims in SOIs).
    """

    ids: Sequence[str]
    vectors: np.ndarray
    is_claim: np.ndarray
    claim_of: Sequence[str | None]
    themes: Sequence[str | None] | None = None
    claim_texts: Mapping[str, str] | None = None

    def validate(self) -> None:
        n = len(self.ids)
        if self.vectors.shape[0] != n or len(self.is_claim) != n or len(self.claim_of) != n:
            raise ValueError("CorpusItems: ids, vectors, is_claim and claim_of must have the same length.")
        if self.themes is not None and len(self.themes) != n:
            raise ValueError("CorpusItems: themes must have one entry per item.")
        if len(set(self.ids)) != n:
            seen: set[str] = set()
            dup = next(i for i in self.ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
            raise ValueError(f"Duplicated node id {dup!r}: every evidence and claim node needs a unique id.")

    def unit_vectors(self, dim: int) -> np.ndarray:
        """The vectors as unit rows, shape ``(n, dim)`` (``ValueError``: another dimension, NaN, an all-zero row)."""
        X = as_matrix(self.vectors, name="new embeddings")
        if X.shape[1] != dim:
            raise ValueError(f"New embeddings have dimension {X.shape[1]}; the context has {dim}.")
        unit = l2_normalize(X)
        if not np.all(np.linalg.norm(unit, axis=1) > 0):
            raise ValueError("A new node has an all-zero embedding.")
        return unit


@dataclass(frozen=True)
class SOIQuery:
    """A located query and its SOI rows: ``key`` = ``(theme, cluster)``, the members the rows index."""

    key: GroupKey
    claim_id: str | None
    members: ClusterMembers
    core: SOICore

    def kinds(self) -> dict[str, str]:
        """``{item id: SOI key}``."""
        return self.core.kinds(self.members)
