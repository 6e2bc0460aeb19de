"""Where BM25 lives: in process, or inside the vector store.

Either way the BM25 table holds a :class:`FittedBM25`: in process a
:class:`~llama_index_carag.ranking.bm25.index.BM25Index` over every passage text; inside a vector store that can
keep BM25 itself (Qdrant: a named sparse vector with the IDF modifier,
:class:`~llama_index_carag.ranking.bm25.qdrant.QdrantBM25`) the per-passage data stays in the store and the
process keeps only per-term data (the vocabulary, ``avgdl``).  Such a store offers a :class:`BM25Placement` that
fits and restores it there, through the corpus's optional ``bm25_placement()`` method
(:func:`bm25_placement_of`), so ``ranking`` names no store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.ranking.fitted_table import TableCorpus


class BM25PlacementUnavailable(ValueError):
    """The store could keep BM25 but cannot here (an older server or client): BM25 stays in process."""


@runtime_checkable
class FittedBM25(Protocol):
    """BM25 fitted on the corpus's evidence, wherever it lives: what the BM25 source, the lexical term and the
    BM25 table read and edit."""

    def top(self, query_str: str, n: int, exclude: frozenset[str] = frozenset()) -> tuple[list[str], np.ndarray]:
        """``(ids, scores)``: the query's top ``n`` passages by BM25 (score > 0, none in ``exclude``), best
        first; ``scores`` shape ``(len(ids),)`` float32."""
        ...

    def scores_of(self, query_str: str, node_ids: Sequence[str]) -> np.ndarray:
        """BM25 scores of ``node_ids``, shape ``(len(node_ids),)`` float32 (0 where not indexed or no match)."""
        ...

    def __len__(self) -> int:
        """The number of indexed passages."""
        ...

    def update(self, corpus: TableCorpus, changed: Sequence[str]) -> None:
        """Index the ``changed`` passages the corpus still holds as evidence (not excluded) with their current
        text, and un-index the others; O(batch)."""
        ...

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(JSON-safe info, arrays)`` for the retriever's state."""
        ...


@runtime_checkable
class BM25Placement(Protocol):
    """BM25 kept inside one vector store: fits and restores a :class:`FittedBM25` there.

    Attributes:
        name: saved with the state (``"qdrant"``), checked when it is loaded.
    """

    name: str

    def fit(self, exclude: frozenset[str]) -> FittedBM25:
        """BM25 over every passage of the store except ``exclude`` (claims stored as points).

        Raises:
            BM25PlacementUnavailable: this server or client cannot keep the index (BM25 then runs in process).
            ValueError: the store holds no passage text, or is configured against it.
        """
        ...

    def restore(self, info: dict[str, Any]) -> FittedBM25:
        """The index the fitted BM25's ``get_state`` described.

        Raises:
            ValueError: the store no longer holds it.
        """
        ...


def bm25_placement_of(corpus: object) -> BM25Placement | None:
    """The corpus's :class:`BM25Placement` (``corpus.bm25_placement()``), or ``None`` when BM25 runs in process
    (the corpus has no such method, or its store cannot keep BM25)."""
    get = getattr(corpus, "bm25_placement", None)
    return None if get is None else get()
