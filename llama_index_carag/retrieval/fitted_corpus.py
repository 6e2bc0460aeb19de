"""``FittedCorpus``: what CARAG learns from a corpus on its index (clusters, claims, fitted tables, calibration).

It is also the corpus as a re-ranking term's fitted table sees it
(:class:`~llama_index_carag.ranking.fitted_table.TableCorpus`): its evidence vectors come from the fitted
context, its stored text from the index, and where the index's store keeps BM25 itself (Qdrant) it offers
that store's BM25 placement (``bm25_placement()``).  :meth:`FittedCorpus.fit_tables` and
:meth:`FittedCorpus.update_tables` fit and update the tables through the registry of terms
(:mod:`llama_index_carag.ranking.assembly`).  :func:`~llama_index_carag.retrieval.fitting.fit_corpus`
builds one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.core.context import ThematicContext
from llama_index_carag.core.vectors import l2_normalize
from llama_index_carag.ranking.assembly import fit_tables, update_tables
from llama_index_carag.retrieval.calibration_result import Calibration
from llama_index_carag.retrieval.journal import EditJournal
from llama_index_carag.stores.vector_stores import adapter_for, nodes_by_id

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import BaseNode

    from llama_index_carag.ranking.bm25 import BM25Placement
    from llama_index_carag.ranking.fitted_table import FittedTable
    from llama_index_carag.settings import CaragSettings

logger = logging.getLogger(__name__)


@dataclass
class FittedCorpus:
    """What CARAG learns from a corpus on its index, shared by every retriever built on it.

    Attributes:
        index: the corpus's index (evidence text and vectors).
        context: the fitted clusters and SOI builder.
        claim_ids: node ids of the clustered claims.
        claim_vectors: their raw embeddings, shape ``(m, d)`` (kept so that ``persist`` saves them exactly).
        exclude_ids: node ids never returned (claims that are also in the index); read it per query, it can grow.
        theme_key, claim_key: metadata keys of the theme and of the claim link.
        clusterer_params: extra :class:`ThematicClusterer` arguments used by the fit.
        tables: the fitted per-passage tables by key (``claim_contrast``, ``hubness_20``, ``lexical``, …;
            :class:`~llama_index_carag.ranking.fitted_table.FittedTable`), fitted as the settings ask.
        calibration: the stage weights calibrated on this corpus's linked claims, or ``None``.
        journal: the edits since the corpus was last persisted with its index
            (:class:`~llama_index_carag.retrieval.journal.EditJournal`).
    """

    index: VectorStoreIndex
    context: ThematicContext
    claim_ids: list[str]
    claim_vectors: np.ndarray
    exclude_ids: frozenset[str] = frozenset()
    theme_key: str = "theme"
    claim_key: str = "claim_id"
    clusterer_params: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, FittedTable] = field(default_factory=dict)
    calibration: Calibration | None = None
    journal: EditJournal = field(default_factory=EditJournal, init=False, compare=False, repr=False)
    _show_progress: bool = field(default=False, init=False, repr=False, compare=False)

    @property
    def claim_units(self) -> np.ndarray | None:
        """The claims as unit vectors (``None`` without claims)."""
        if not self.claim_ids:
            return None
        units = getattr(self, "_claim_units", None)
        if units is None or units.shape[0] != len(self.claim_ids):
            units = l2_normalize(self.claim_vectors)
            self._claim_units = units
        return units

    def exclude(self, node_ids: Sequence[str]) -> bool:
        """Never return these ids; True when the set grew."""
        new = set(node_ids) - self.exclude_ids
        if new:
            self.exclude_ids = frozenset(self.exclude_ids | new)
        return bool(new)

    def evidence_ids(self) -> list[str]:
        """The evidence passages (the clustered items that are not claims), in the context's order."""
        claims = set(self.claim_ids)
        return [i for i, _ in self.context.iter_items() if i not in claims]

    # ------------------------------------------------------------- as a TableCorpus
    def evidence_units(self) -> tuple[list[str], np.ndarray]:
        """``(ids, unit vectors of shape (n, d))`` of the evidence held in memory (empty on Qdrant)."""
        return self.context.evidence_units()

    def evidence_blocks(self) -> Iterable[tuple[list[str], np.ndarray]]:
        """The same evidence in blocks, without one big copy."""
        return self.context.evidence_blocks()

    def nodes(self, ids: Sequence[str]) -> list[BaseNode | None]:
        """The stored nodes of ``ids`` (``None`` where none is stored)."""
        return nodes_by_id(self.index, ids)

    def bm25_placement(self) -> BM25Placement | None:
        """The store's BM25 backend (Qdrant), or ``None`` (BM25 in process)."""
        return adapter_for(self.index).bm25_placement(show_progress=self._show_progress)

    # ------------------------------------------------------------- fitted tables
    def fit_tables(self, settings: CaragSettings, *, show_progress: bool = False) -> list[str]:
        """Fit the tables ``settings`` use that the corpus lacks (no-op when all are fitted); the keys fitted.

        Raises:
            ValueError: ``claim_contrast`` without claims, ``hub_penalty`` on a Qdrant collection,
                ``lexical_weight`` without stored text (or a Qdrant collection that cannot get the BM25 vector).
        """
        self._show_progress = show_progress  # progress bars while a table is fitted in the vector store
        try:
            return fit_tables(self, self.tables, settings)
        finally:
            self._show_progress = False

    def update_tables(self, changed: Sequence[str]) -> list[str]:
        """After an edit of the ``changed`` passages: tables update in place or are dropped (refitted by
        :meth:`fit_tables`); the keys dropped."""
        return update_tables(self, self.tables, changed)
