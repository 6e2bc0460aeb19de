"""The fitted per-passage table of a re-ranking term, and the corpus as such a table sees it.

A :class:`FittedTable` (the claim-contrast table, the hubness, the BM25 index) is

* **fitted** once on the corpus (:meth:`FittedTable.from_corpus`) for the settings of a term that is on
  (:meth:`FittedTable.key_for` names the table those settings use);
* **used** per query by its term's scorer and through the candidate sources it adds
  (:meth:`FittedTable.sources`): cheap lookups, no fit-time work;
* **kept or refitted** after an insert or delete (:meth:`FittedTable.update`);
* **saved** as JSON plus numpy arrays (:meth:`FittedTable.get_state` /
  :meth:`FittedTable.from_state`) inside the retriever's one atomic state.

A table belongs to one :class:`~llama_index_carag.ranking.rerank_term.RerankTerm` (its ``table``); the fitted
corpus holds its tables in one dict keyed by :attr:`FittedTable.key`, and fitting, updating and persisting
loop over the registry of terms and that dict (:mod:`llama_index_carag.ranking.assembly`).

A table reads the corpus only through :class:`TableCorpus`, so ``ranking`` never imports
``retrieval`` (the retriever passes a view of its index and fitted corpus).  A corpus may also offer
``bm25_placement()`` (:func:`~llama_index_carag.ranking.bm25.placement.bm25_placement_of`): a store
that keeps the BM25 index itself (Qdrant), used by the BM25 table instead of an in-process index.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.schema import BaseNode

    from llama_index_carag.ranking.sources import CandidateSource
    from llama_index_carag.settings import CaragSettings


@runtime_checkable
class TableCorpus(Protocol):
    """The fitted corpus as a table sees it (evidence, claims, stored text)."""

    @property
    def claim_units(self) -> np.ndarray | None:
        """The corpus's claims as unit vectors, shape ``(m, d)`` (``None`` without claims)."""
        ...

    @property
    def exclude_ids(self) -> frozenset[str]:
        """Ids never returned as evidence (claims stored in the index); read it per query, it can grow."""
        ...

    def evidence_units(self) -> tuple[list[str], np.ndarray]:
        """``(ids, unit vectors of shape (n, d))`` of the evidence held in memory (empty on Qdrant)."""
        ...

    def evidence_blocks(self) -> Iterable[tuple[list[str], np.ndarray]]:
        """The same evidence in blocks, ``(ids, unit vectors of shape (k, d))``, without one big copy."""
        ...

    def evidence_ids(self) -> list[str]:
        """Every evidence passage's id (claims left out), in the context's order."""
        ...

    def nodes(self, ids: Sequence[str]) -> list[BaseNode | None]:
        """The stored nodes of ``ids`` (``None`` where none is stored), for tables that read text."""
        ...


@runtime_checkable
class FittedTable(Protocol):
    """A per-passage table fitted on the corpus, used per query by its term, saved with the retriever.

    Attributes:
        name: the table type (class attribute); saved with the state to find the class again.
        key: this table's key in the corpus's tables (``name``, or ``name`` plus the parameters
            it was fitted with, e.g. ``hubness_20``); letters, digits and underscores.
    """

    name: str

    @property
    def key(self) -> str:
        """This table's key in the corpus's tables."""
        ...

    @classmethod
    def key_for(cls, settings: CaragSettings) -> str:
        """The key of the table ``settings`` use (when its term is on)."""
        ...

    @classmethod
    def from_corpus(cls, settings: CaragSettings, corpus: TableCorpus) -> FittedTable:
        """A table configured from ``settings`` and fitted on ``corpus`` (the fit-time cost).

        Raises:
            ValueError: the corpus lacks what the table needs (claims, vectors, text).
        """
        ...

    def update(self, corpus: TableCorpus, changed: Sequence[str]) -> bool:
        """After an insert, delete or sync of the ``changed`` passages: update in place and return
        True, or return False to have the table dropped and refitted."""
        ...

    def sources(self, corpus: TableCorpus) -> list[CandidateSource]:
        """The candidate sources the table adds to the dense search (usually none)."""
        ...

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(JSON-safe info, {array name: array})``; array names are letters, digits and underscores."""
        ...

    @classmethod
    def from_state(cls, info: dict[str, Any], arrays: dict[str, np.ndarray], corpus: TableCorpus) -> FittedTable:
        """The table :meth:`get_state` saved.

        Raises:
            ValueError / KeyError / TypeError: the saved table is unreadable or does not fit ``corpus``.
        """
        ...


def check_table_key(key: str) -> str:
    """``key`` itself when it can name arrays in a state (letters, digits, underscores).

    Raises:
        ValueError: any other character, or an empty key.
    """
    if not key or not key.replace("_", "").isalnum():
        raise ValueError(f"A fitted table's key must be letters, digits and underscores; got {key!r}.")
    return key
