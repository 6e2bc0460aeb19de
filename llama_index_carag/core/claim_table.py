"""The clustered claims of a fitted context: ids, texts, and recognising a query as one of them.

:class:`ClaimTable` is immutable: an update builds a new table and the context swaps
it in with one assignment, so a concurrent query reads one consistent table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from llama_index_carag.core.corpus_items import CorpusItems
from llama_index_carag.core.validation import normalize_text

__all__ = ["ClaimTable"]


class ClaimTable:
    """``{claim id: claim node id}`` and ``{claim node id: text}`` of the clustered claims.

    Args:
        node_of: claim id (the annotation key) → the claim's node id.
        texts: claim node id → its text.
    """

    __slots__ = ("node_of", "texts", "_by_text")

    def __init__(self, node_of: Mapping[str, str] | None = None, texts: Mapping[str, str] | None = None) -> None:
        self.node_of: dict[str, str] = dict(node_of or {})
        self.texts: dict[str, str] = dict(texts or {})
        self._by_text: dict[str, str] | None = None

    @classmethod
    def of_items(cls, items: CorpusItems) -> ClaimTable:
        """The claims among ``items`` (rows with ``is_claim``)."""
        return cls().with_items(items)

    def with_items(self, items: CorpusItems) -> ClaimTable:
        """This table plus the claims among ``items`` (a claim id seen again points to its new node)."""
        node_of = dict(self.node_of)
        claim_of = list(items.claim_of)
        for i in np.flatnonzero(np.asarray(items.is_claim, dtype=bool)):
            node_of[str(claim_of[i])] = items.ids[int(i)]
        return ClaimTable(node_of, {**self.texts, **(items.claim_texts or {})})

    def without(self, removed: Sequence[tuple[str, str | None]]) -> ClaimTable:
        """This table without the removed ``(node id, claim id)`` pairs (``self`` when there are none)."""
        if not removed:
            return self
        node_of, texts = dict(self.node_of), dict(self.texts)
        for node_id, claim in removed:
            node_of.pop(str(claim), None)
            texts.pop(node_id, None)
        return ClaimTable(node_of, texts)

    def text(self, node_id: str) -> str:
        """The text of a claim node (empty when unknown)."""
        return self.texts.get(node_id, "")

    def match(self, text: str) -> str | None:
        """Claim id of the claim whose text equals ``text`` (case/space-insensitive), else ``None``."""
        if self._by_text is None:
            node_claim = {node: cid for cid, node in self.node_of.items()}
            self._by_text = {normalize_text(t): node_claim[n] for n, t in self.texts.items() if n in node_claim}
        return self._by_text.get(normalize_text(text))
