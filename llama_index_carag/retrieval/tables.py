"""A fitted corpus's per-passage tables, fitted and kept up to date on its index.

The tables (:class:`~llama_index_carag.ranking.tables.FittedTable`) live in
``FittedCorpus.tables``; they read the corpus through :class:`CorpusView`, which joins the
fitted corpus with its index (the stored text comes from the index), so ``ranking`` needs
nothing from ``retrieval``; where the index's store keeps BM25 itself (Qdrant) the view offers its
lexical backend (``lexical_backend()``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from llama_index_carag.backends.vector_stores import adapter_for, nodes_by_id
from llama_index_carag.ranking.assembly import fit_tables, update_tables

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import BaseNode

    from llama_index_carag.ranking.bm25 import BM25Placement
    from llama_index_carag.retrieval.fitting import FittedCorpus
    from llama_index_carag.settings import CaragSettings

__all__ = ["CorpusView", "fit_corpus_tables", "update_corpus_tables"]


class CorpusView:
    """A fitted corpus on its index, as a :class:`~llama_index_carag.ranking.tables.TableCorpus` (live: reads
    the corpus at each call, so the claims excluded later are excluded too).

    Args:
        index: the corpus's index.
        corpus: the fitted corpus.
        show_progress: progress bars while a table is fitted in the vector store.
    """

    def __init__(self, index: VectorStoreIndex, corpus: FittedCorpus, *, show_progress: bool = False) -> None:
        self.index = index
        self.corpus = corpus
        self.show_progress = show_progress

    @property
    def claim_units(self) -> np.ndarray | None:
        return self.corpus.claim_units

    @property
    def exclude_ids(self) -> frozenset[str]:
        return self.corpus.exclude_ids

    def evidence_units(self) -> tuple[list[str], np.ndarray]:
        return self.corpus.context.evidence_units()

    def evidence_blocks(self) -> Iterable[tuple[list[str], np.ndarray]]:
        return self.corpus.context.evidence_blocks()

    def evidence_ids(self) -> list[str]:
        return self.corpus.evidence_ids()

    def nodes(self, ids: Sequence[str]) -> list[BaseNode | None]:
        return nodes_by_id(self.index, ids)

    def lexical_backend(self) -> BM25Placement | None:
        """The store's BM25 backend (Qdrant), or ``None`` (BM25 in process)."""
        return adapter_for(self.index).lexical_backend(show_progress=self.show_progress)


def fit_corpus_tables(
    index: VectorStoreIndex, corpus: FittedCorpus, settings: CaragSettings, *, show_progress: bool = False
) -> list[str]:
    """Fit the tables ``settings`` use that the corpus lacks (no-op when all are fitted); the keys fitted.

    Raises:
        ValueError: ``claim_contrast`` without claims, ``hub_penalty`` on a Qdrant collection,
            ``lexical_weight`` without stored text (or a Qdrant collection that cannot get the BM25 vector).
    """
    return fit_tables(CorpusView(index, corpus, show_progress=show_progress), corpus.tables, settings)


def update_corpus_tables(index: VectorStoreIndex, corpus: FittedCorpus, changed: Sequence[str]) -> list[str]:
    """After an edit of the ``changed`` passages: tables update in place or are dropped (refitted by
    :func:`fit_corpus_tables`); the keys dropped."""
    return update_tables(CorpusView(index, corpus), corpus.tables, changed)
