"""BM25 kept in the vector store: what the lexical table asks of a store that holds the BM25 index itself.

In process, the lexical table fits a :class:`~llama_index_carag.ranking.bm25.LexicalIndex` over every
passage text.  A vector store that can keep BM25 itself (Qdrant: a named sparse vector with the IDF
modifier, :mod:`llama_index_carag.backends.qdrant_lexical`) gives a :class:`LexicalBackend` instead; it
fits a :class:`StoredLexicalIndex` whose per-passage data stays in the store (the process keeps only
per-term data: the vocabulary, ``avgdl``).  The corpus offers the backend through an optional
``lexical_backend()`` method (:func:`lexical_backend_of`), so ``ranking`` names no store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["StoredLexicalIndex", "LexicalBackend", "LexicalBackendUnavailable", "lexical_backend_of"]


class LexicalBackendUnavailable(ValueError):
    """The store could keep BM25 but cannot here (an older server or client): BM25 stays in process."""


@runtime_checkable
class StoredLexicalIndex(Protocol):
    """A BM25 index kept in the vector store (a :class:`~llama_index_carag.ranking.lexical.LexicalScores`).

    Attributes:
        backend: the backend's name, saved with the state (``"qdrant"``).
    """

    backend: str

    def top(self, query_str: str, n: int, exclude: frozenset[str] = frozenset()) -> tuple[list[str], np.ndarray]:
        """``(ids, scores)`` of the top ``n`` (score > 0, none in ``exclude``), best first; float32 scores."""
        ...

    def scores_of(self, query_str: str, node_ids: Sequence[str]) -> np.ndarray:
        """BM25 scores of ``node_ids``, shape ``(len(node_ids),)`` float32 (0 where none)."""
        ...

    def __len__(self) -> int:
        """The number of indexed passages."""
        ...

    def update(self, changed: Sequence[str], exclude: frozenset[str]) -> None:
        """Index the ``changed`` passages the store still holds (not in ``exclude``) with their current text,
        and un-index those in ``exclude``; O(batch)."""
        ...

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(JSON-safe info, arrays)``: per-term data and settings only (no per-passage arrays)."""
        ...


@runtime_checkable
class LexicalBackend(Protocol):
    """Fits and reloads a :class:`StoredLexicalIndex` in one vector store.

    Attributes:
        name: saved with the state (``"qdrant"``), checked when it is loaded.
    """

    name: str

    def fit(self, exclude: frozenset[str]) -> StoredLexicalIndex:
        """BM25 over every passage of the store except ``exclude`` (claims stored as points).

        Raises:
            LexicalBackendUnavailable: this server or client cannot keep the index (BM25 then runs in process).
            ValueError: the store holds no passage text, or is configured against it.
        """
        ...

    def restore(self, info: dict[str, Any]) -> StoredLexicalIndex:
        """The index :meth:`StoredLexicalIndex.get_state` described.

        Raises:
            ValueError: the store no longer holds it.
        """
        ...


def lexical_backend_of(corpus: object) -> LexicalBackend | None:
    """The corpus's :class:`LexicalBackend` (``corpus.lexical_backend()``), or ``None`` when BM25 runs in process
    (the corpus has no such method, or its store cannot keep BM25)."""
    get = getattr(corpus, "lexical_backend", None)
    return None if get is None else get()
