"""Why a check's SOI is empty, with the closest item looked up: ``soi.empty_reason`` of every check result.

:func:`closest_item` asks the fitted context for the same SOI at δ = -1 with one item (the claim's cluster,
the same candidate rules), which is the cluster's item nearest the claim; :func:`empty_reason` gives the
:class:`~llama_index_carag.core.empty_soi.EmptySOIReason` (``None`` when the SOI holds items).  The
:class:`~llama_index_carag.verdicts.check.ClaimChecker` asks it once per claim, with the claim's vector, so
``carag check``, ``check-text``, a batch and ``carag serve`` all carry it.  The ranking is not touched: this
only explains what the retriever did.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import QueryBundle

from llama_index_carag.core.empty_soi import EmptySOIReason
from llama_index_carag.retrieval.query_plan import checked_vector, query_embedding

logger = logging.getLogger(__name__)

__all__ = ["closest_item", "empty_reason", "REASON_KEY"]

#: The key of the reason in a result's ``soi`` dict.
REASON_KEY = "empty_reason"


def closest_item(retriever: Any, claim: str, vector: Sequence[float] | None = None) -> tuple[str, float] | None:
    """``(id, cosine)`` of the item of ``claim``'s cluster nearest to it under the retriever's SOI rules.

    ``vector``: the claim's embedding when the caller has it (else the claim is embedded once more).
    ``None`` when the cluster holds no candidate.
    """
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
