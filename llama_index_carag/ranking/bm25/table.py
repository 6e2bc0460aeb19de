"""The per-corpus BM25 table: fitted on the evidence text, saved in the retriever's atomic state.

:class:`BM25Table` (key ``lexical``) holds one
:class:`~llama_index_carag.ranking.bm25.placement.FittedBM25` and contributes the BM25 candidate source
(:class:`~llama_index_carag.ranking.bm25.source.BM25Source`), which the lexical term
(:data:`~llama_index_carag.ranking.assembly.LEXICAL`) reads.  BM25 lives

* in process, a :class:`~llama_index_carag.ranking.bm25.index.BM25Index` (FAISS, the simple store, …): an
  insert or delete updates it in place in O(batch) (a new segment, tombstones; scores equal a rebuild's);
* in the vector store when the corpus offers a
  :class:`~llama_index_carag.ranking.bm25.placement.BM25Placement` (Qdrant: a sparse vector): an insert
  upserts the batch's vectors in O(batch) with the ``avgdl`` frozen at fit time, a delete takes the points'
  vectors with them.

Only ``refit()`` rebuilds it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.ranking.bm25.index import BM25Index, embed_text
from llama_index_carag.ranking.bm25.placement import BM25PlacementUnavailable, FittedBM25, bm25_placement_of
from llama_index_carag.ranking.bm25.source import BM25Source

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.ranking.fitted_table import TableCorpus
    from llama_index_carag.ranking.sources import CandidateSource
    from llama_index_carag.settings import CaragSettings

logger = logging.getLogger(__name__)


def bm25_source(sources: Sequence[CandidateSource]) -> BM25Source | None:
    """The BM25 source among ``sources``, if any."""
    return next((src for src in sources if isinstance(src, BM25Source)), None)


class BM25Table:
    """The fitted BM25 of the corpus's evidence (a :class:`~llama_index_carag.ranking.fitted_table.FittedTable`).

    Args:
        index: the fitted BM25: in process, or kept in the vector store.
    """

    name = "lexical"
    key = "lexical"

    def __init__(self, index: FittedBM25) -> None:
        self.index = index

    def __len__(self) -> int:
        return len(self.index)

    @classmethod
    def key_for(cls, settings: CaragSettings) -> str:
        return cls.key

    @classmethod
    def from_corpus(cls, settings: CaragSettings, corpus: TableCorpus) -> BM25Table:
        """BM25 over the evidence text (docstore, or the vector store when it keeps the text); kept in the
        vector store when the corpus offers a BM25 placement (Qdrant), else in process.

        A store that could keep BM25 but cannot here (an older Qdrant server or client) logs a warning and
        gets the in-process index.

        Raises:
            ValueError: no evidence text could be found (or the store is configured against the index).
        """
        placement = bm25_placement_of(corpus)
        if placement is not None:
            try:
                return cls(placement.fit(corpus.exclude_ids))
            except BM25PlacementUnavailable as exc:  # an older server or client: BM25 in process
                logger.warning("BM25 runs in process: %s", exc)
        texts = _EvidenceTexts(corpus, corpus.evidence_ids())
        try:
            index = BM25Index().fit_chunks(texts, total=len(texts.ids))
        except ValueError:
            if texts.found:
                raise
            raise ValueError(
                "lexical_weight needs the evidence text, but neither the docstore nor the vector store holds it."
            ) from None
        if texts.found < len(texts.ids):
            logger.warning(
                "BM25: %d of %d evidence passages have no stored text; they get no lexical score.",
                len(texts.ids) - texts.found,
                len(texts.ids),
            )
        return cls(index)

    def update(self, corpus: TableCorpus, changed: Sequence[str]) -> bool:
        """In place, O(batch): the ``changed`` passages leave the index, and those the store still
        holds as evidence (not excluded) come back with their current text.  Call it after the
        corpus's claims and context are updated.  (In the vector store: the batch's vectors are
        upserted with the ``avgdl`` frozen at fit time; deleted points took theirs with them.)"""
        if changed:
            self.index.update(corpus, changed)
        return True

    def sources(self, corpus: TableCorpus) -> list[CandidateSource]:
        return [BM25Source(self.index, corpus.nodes, lambda: corpus.exclude_ids)]

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return self.index.get_state()

    @classmethod
    def from_state(cls, info: dict[str, Any], arrays: dict[str, np.ndarray], corpus: TableCorpus) -> BM25Table:
        """The saved BM25 (one kept in the vector store is found there again).  An in-process index saved on a
        store that can keep BM25 itself (fitted where the store could not take it) is read as saved:
        ``refit()`` moves it.

        Raises:
            ValueError: it does not cover the corpus's evidence, or the store no longer keeps it.
        """
        stored = info.get("placement")
        if stored is not None:
            placement = bm25_placement_of(corpus)
            if placement is None or placement.name != stored:
                raise ValueError(f"the BM25 index was saved in a {stored} store, not in this index's store")
            return cls(placement.restore(info))
        index = BM25Index.from_state(info, arrays)
        if set(index.ids_) != set(corpus.evidence_ids()):
            raise ValueError("the saved BM25 index does not cover the saved evidence")
        return cls(index)


class _EvidenceTexts:
    """The evidence passages' ``(ids, texts)`` in chunks of about ``chunk``, read ``nodes_at_once`` nodes at a
    time, so a large corpus never holds every node object, nor every text, at once (an iterable of chunks for
    :meth:`~llama_index_carag.ranking.bm25.index.BM25Index.fit_chunks`).  Passages without stored text are
    skipped; ``found`` counts the others read so far."""

    def __init__(self, corpus: TableCorpus, ids: Sequence[str], *, nodes_at_once: int = 5_000, chunk: int = 50_000):
        self.corpus = corpus
        self.ids = ids
        self.nodes_at_once = nodes_at_once
        self.chunk = chunk
        self.found = 0

    def __iter__(self) -> Iterator[tuple[list[str], list[str]]]:
        out_ids: list[str] = []
        texts: list[str] = []
        for start in range(0, len(self.ids), self.nodes_at_once):
            for node in self.corpus.nodes(self.ids[start : start + self.nodes_at_once]):
                if node is not None:
                    out_ids.append(node.node_id)
                    texts.append(embed_text(node))
            if len(out_ids) >= self.chunk:
                self.found += len(out_ids)
                yield out_ids, texts
                out_ids, texts = [], []
        if out_ids:
            self.found += len(out_ids)
            yield out_ids, texts
