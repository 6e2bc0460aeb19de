"""Why an SOI is empty, in words, with the closest item looked up: ``soi.empty_reason`` of every check result.

An empty SOI is not an error: nothing of the claim's cluster passed the threshold ``delta`` (under the papers'
rule, ``soi_min_size=0``; the default keeps the claim's nearest cluster items, so its SOI is empty only when the
cluster holds no candidate), so the thematic embedding ``T`` does not exist and the query is the claim vector
alone.  :class:`EmptySOIReason` says so with the numbers: the threshold, the cluster's size and the closest item
and its cosine.  :func:`closest_item` finds that item by asking the fitted context for the same SOI at δ = -1
with one item (the same candidate rules); :func:`empty_reason` gives the reason (``None`` when the SOI holds
items).  The :class:`~llama_index_carag.verdicts.check.ClaimChecker` asks it once per claim, with the claim's
vector, so ``carag check``, ``check-text``, a batch and ``carag serve`` all carry it, and the SOI graph's caption
uses its :meth:`~EmptySOIReason.text`.  The ranking is not touched: this only explains what the retriever did.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llama_index_carag.core.soi import SOI_LIST_KEYS

if TYPE_CHECKING:  # pragma: no cover - typing only
    from llama_index_carag.core.soi import SubsetOfInterest

logger = logging.getLogger(__name__)


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


#: The key of the reason in a result's ``soi`` dict.
REASON_KEY = "empty_reason"


def closest_item(retriever: Any, claim: str, vector: Sequence[float] | None = None) -> tuple[str, float] | None:
    """``(id, cosine)`` of the item of ``claim``'s cluster nearest to it under the retriever's SOI rules.

    ``vector``: the claim's embedding when the caller has it (else the claim is embedded once more).
    ``None`` when the cluster holds no candidate.
    """
    # imported here, not with the module: visualize imports EmptySOIReason and must stay light to import
    from llama_index.core.schema import QueryBundle

    from llama_index_carag.retrieval.query_plan import checked_vector, query_embedding

    if vector is None:
        vector = query_embedding(retriever.embed_model, QueryBundle(claim))
    context = retriever.context
    soi = context.build_soi(checked_vector(vector, context.dim_), -1.0, claim=claim, top_m=1, include_texts=False)
    items = list(soi.items())
    return (items[0].id, float(items[0].similarity)) if items else None


def empty_reason(retriever: Any, soi: Any, claim: str, vector: Sequence[float] | None = None) -> EmptySOIReason | None:
    """The reason ``soi`` (an SOI or its dict) is empty, with the closest item; ``None`` when it holds items."""
    dense_only = retriever.settings.rerank_candidates is None
    if EmptySOIReason.of(soi) is None:
        return None
    return EmptySOIReason.of(soi, closest_item(retriever, claim, vector), dense_only=dense_only)
