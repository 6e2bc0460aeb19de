"""The evidence as the LLM is shown it: passage texts with the annotation metadata hidden.

A gold label, theme or claim id in the prompt would decide the verdict, so :func:`hide_labels`
excludes those keys (and the ``carag`` provenance) from the LLM's view of every node, whatever
the node's own exclusion lists say; :func:`evidence_texts` renders what the LLM then reads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from llama_index.core.schema import NodeWithScore

from llama_index_carag.core.provenance import CARAG_METADATA_KEY

logger = logging.getLogger(__name__)

__all__ = ["evidence_texts", "hide_labels"]


def evidence_texts(nodes: Sequence[NodeWithScore]) -> list[str]:
    """The passage texts the LLM is shown for ``nodes`` (LLM metadata mode, annotation metadata hidden)."""
    from llama_index.core.schema import MetadataMode

    return [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in hide_labels(nodes)]


def hide_labels(nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
    """Copies of ``nodes`` whose annotation keys (theme, claim id, label, …) never reach the LLM,
    whatever their own exclusion lists say: a gold label in the prompt would decide the verdict."""
    from llama_index_carag.datasets import LABEL_METADATA_KEYS

    hidden = [*LABEL_METADATA_KEYS, CARAG_METADATA_KEY]
    out = []
    for n in nodes:
        missing = [k for k in hidden if k in n.node.metadata and k not in n.node.excluded_llm_metadata_keys]
        if missing:
            node = n.node.model_copy(
                update={"excluded_llm_metadata_keys": [*n.node.excluded_llm_metadata_keys, *missing]}
            )
            out.append(NodeWithScore(node=node, score=n.score))
        else:
            out.append(n)
    return out
