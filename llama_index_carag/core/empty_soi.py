"""Why a Subset of Interest is empty, in words: nothing of the claim's cluster above δ, the closest item, what the
query becomes.

An empty SOI is not an error: the threshold ``delta`` kept no item of the claim's cluster, so the thematic
embedding ``T`` does not exist and the query is the claim vector alone.  Under the papers' rule (δ = 0.75
alone, ``soi_min_size=0``, the ``paper`` preset) this is common for new claims; the default preset keeps the
claim's nearest cluster items (``soi_min_size=3``), so its SOI is empty only when the cluster holds no candidate.
:class:`EmptySOIReason` says so with the numbers: the threshold, the cluster's size and, when the caller
looked it up, the closest item and its cosine (every claim check finds it with one more SOI query at
δ = -1, :mod:`llama_index_carag.retrieval.soi_reason`).  The SOI graph's caption, ``carag check``'s table and
every check result (``soi.empty_reason``: the CLI's ``--json``, ``carag serve``'s API and page) use its
:meth:`~EmptySOIReason.text`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llama_index_carag.core.soi import SOI_LIST_KEYS

if TYPE_CHECKING:  # pragma: no cover - typing only
    from llama_index_carag.core.soi import SubsetOfInterest

__all__ = ["EmptySOIReason"]


@dataclass(frozen=True)
class EmptySOIReason:
    """Why an SOI is empty.

    Attributes:
        delta: the SOI's cosine threshold (items are kept above it).
        cluster_size: the items of the claim's cluster it was compared with.
        cluster: the claim's cluster, or ``None`` when unknown.
        closest_id: the cluster's item most similar to the claim (``None`` when not looked up or none).
        closest_similarity: its cosine to the claim.
        dense_only: the retriever re-ranks nothing, so the search is plain dense retrieval with the claim.
    """

    delta: float
    cluster_size: int
    cluster: int | None = None
    closest_id: str | None = None
    closest_similarity: float | None = None
    dense_only: bool = False

    @classmethod
    def of(
        cls,
        soi: SubsetOfInterest | Mapping[str, Any],
        closest: tuple[str, float] | None = None,
        *,
        dense_only: bool = False,
    ) -> EmptySOIReason | None:
        """The reason of ``soi`` (an SOI or its ``to_dict()``) being empty; ``None`` when it holds items.

        ``closest``: ``(id, cosine)`` of the cluster's item nearest the claim, when the caller looked it up.
        """
        data = soi.to_dict() if hasattr(soi, "to_dict") else soi
        if any(data.get(key) for key in SOI_LIST_KEYS):
            return None
        cluster = data.get("cluster")
        return cls(
            delta=float(data.get("delta", math.nan)),
            cluster_size=int(data.get("cluster_size") or 0),
            cluster=None if cluster is None else int(cluster),
            closest_id=None if closest is None else str(closest[0]),
            closest_similarity=None if closest is None else float(closest[1]),
            dense_only=dense_only,
        )

    def text(self) -> str:
        """One sentence: ``"SOI empty: no item of the claim's cluster 5 (24 items) has a cosine … above δ=0.75 …"``."""
        where = "the claim's cluster" if self.cluster is None else f"the claim's cluster {self.cluster}"
        if self.cluster_size == 0:
            why = f"{where} holds no item to compare with"
        else:
            items = "1 item" if self.cluster_size == 1 else f"{self.cluster_size} items"
            why = f"no item of {where} ({items}) has a cosine to the claim above δ={self.delta:.2f}"
            if self.closest_similarity is not None:
                why += f" (the closest: {self.closest_similarity:.2f})"
        search = "plain dense search for this claim" if self.dense_only else "ranked without the thematic term T"
        return f"SOI empty: {why}; the query is the claim alone ({search})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``text`` and the numbers behind it (``carag check --json``'s ``soi.empty_reason``)."""
        return {
            "text": self.text(),
            "delta": self.delta,
            "cluster_size": self.cluster_size,
            "closest_id": self.closest_id,
            "closest_similarity": self.closest_similarity,
        }
