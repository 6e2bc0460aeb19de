"""The ``carag`` provenance dict attached to every returned node."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only: importing the key stays light
    from llama_index.core.schema import BaseNode

__all__ = ["CARAG_METADATA_KEY", "with_carag_metadata"]

#: Key of the provenance dict attached to every returned node.
CARAG_METADATA_KEY = "carag"


def with_carag_metadata(node: BaseNode, info: dict[str, Any]) -> BaseNode:
    """A shallow copy of ``node`` with ``metadata["carag"] = info``, the key hidden from embeddings and LLMs."""
    metadata = dict(node.metadata)
    metadata[CARAG_METADATA_KEY] = info
    embed_excl = list(node.excluded_embed_metadata_keys)
    llm_excl = list(node.excluded_llm_metadata_keys)
    if CARAG_METADATA_KEY not in embed_excl:
        embed_excl.append(CARAG_METADATA_KEY)
    if CARAG_METADATA_KEY not in llm_excl:
        llm_excl.append(CARAG_METADATA_KEY)
    return node.model_copy(
        update={
            "metadata": metadata,
            "excluded_embed_metadata_keys": embed_excl,
            "excluded_llm_metadata_keys": llm_excl,
        }
    )
