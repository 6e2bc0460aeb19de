"""Competing-claim contrast: how close each evidence passage lies to the corpus's *other* claims.

A fact-checking corpus is a set of claims with evidence written for each.  For a
query claim ``q`` and a passage ``n``, the contrast ``c(n)`` is the cosine of ``n``
to the most similar corpus claim that is not ``q`` itself — claims with cosine
``> threshold`` to ``q`` count as ``q`` (the query when it is a corpus claim, and its
near-paraphrases).  A passage much closer to another claim than to ``q`` is probably
that claim's evidence; :class:`~llama_index_carag.retrieval.retriever.ContextAwareRetriever`
subtracts ``beta * c(n)`` when it re-ranks (``claim_contrast=beta``).

:class:`ClaimContrast` precomputes each passage's ``top`` nearest claims once, so a
query costs one claim-vector product plus a table lookup per candidate; a passage
unknown to the table (inserted later) or whose ``top`` nearest claims are all
excluded is computed exactly.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.ranking.fitted_table import TableCorpus
    from llama_index_carag.ranking.pool import CandidatePool, RankQuery
    from llama_index_carag.ranking.sources import CandidateSource
    from llama_index_carag.settings import CaragSettings

logger = logging.getLogger(__name__)

_BLOCK_CELLS = 1 << 22  # passage x claim similarities held at once while tabulating (16 MB; with argpartition ~80 MB)


class ClaimContrast:
    """Nearest-claim table for the competing-claim term.

    The fitted table (:class:`~llama_index_carag.ranking.fitted_table.FittedTable`, key ``claim_contrast``)
    and the values (``scores``) of the claim-contrast term (``- claim_contrast * c(n)``,
    :data:`~llama_index_carag.ranking.assembly.CLAIM_CONTRAST`): an insert or delete only drops the changed
    passages, which are then computed exactly.

    Args:
        claim_units: the corpus's claims as unit vectors, shape ``(m, d)``.
        top: nearest claims kept per passage.
        threshold: claims with cosine ``> threshold`` to the query are not competitors.

    Attributes (after :meth:`fit`):
        sims_: shape ``(n, top)``, each passage's cosines to its nearest claims, descending.
        claims_: shape ``(n, top)``, the matching claim rows.
    """

    name = "claim_contrast"
    key = "claim_contrast"

    def __init__(self, claim_units: np.ndarray, *, top: int = 8, threshold: float = 0.9) -> None:
        units = np.asarray(claim_units, dtype=np.float32)
        if units.ndim != 2 or units.shape[0] == 0:
            raise ValueError("ClaimContrast needs at least one claim vector, shape (m, d).")
        self.claim_units = units
        self.top = max(1, min(int(top), units.shape[0]))
        self.threshold = float(threshold)
        self._rows: dict[str, int] = {}
        self._lock = threading.Lock()
        self.sims_ = np.zeros((0, self.top), dtype=np.float32)
        self.claims_ = np.zeros((0, self.top), dtype=np.int32)

    def fit(self, node_ids: Sequence[str], unit_vectors: np.ndarray) -> ClaimContrast:
        """Tabulate the ``top`` nearest claims of each passage.

        Args:
            node_ids: passage ids, length ``n``.
            unit_vectors: their unit vectors, shape ``(n, d)``.
        """
        return self.fit_blocks([(node_ids, unit_vectors)])

    def fit_blocks(self, blocks: Iterable[tuple[Sequence[str], np.ndarray]]) -> ClaimContrast:
        """:meth:`fit` on passages given in blocks ``(ids, unit vectors of shape (k, d))`` (a corpus's clusters):
        no matrix of every passage is ever built."""
        all_ids: list[str] = []
        sims_parts: list[np.ndarray] = []
        claims_parts: list[np.ndarray] = []
        for node_ids, unit_vectors in blocks:
            vectors = np.asarray(unit_vectors, dtype=np.float32)
            if vectors.shape != (len(node_ids), self.claim_units.shape[1]):
                raise ValueError(
                    f"Expected {len(node_ids)} unit vectors of dimension {self.claim_units.shape[1]}; "
                    f"got shape {vectors.shape}."
                )
            sims, claims = self._nearest_claims(vectors)
            all_ids += node_ids
            sims_parts.append(sims)
            claims_parts.append(claims)
        top = self.top
        with self._lock:
            self.sims_ = np.concatenate(sims_parts) if sims_parts else np.zeros((0, top), np.float32)
            self.claims_ = np.concatenate(claims_parts) if claims_parts else np.zeros((0, top), np.int32)
            self._rows = {node_id: r for r, node_id in enumerate(all_ids)}
        logger.debug("Claim-contrast table: %d passages x %d nearest claims.", len(all_ids), top)
        return self

    def _nearest_claims(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row's ``top`` nearest claims: ``(cosines, claim rows)``, both shape ``(n, top)``, descending."""
        n, top = vectors.shape[0], self.top
        sims = np.empty((n, top), dtype=np.float32)
        claims = np.empty((n, top), dtype=np.int32)
        step = max(1, _BLOCK_CELLS // self.claim_units.shape[0])
        for start in range(0, n, step):
            block = vectors[start : start + step] @ self.claim_units.T  # (b, m)
            part = (
                np.argpartition(-block, top - 1, axis=1)[:, :top]
                if top < block.shape[1]
                else np.tile(np.arange(block.shape[1]), (block.shape[0], 1))
            )
            values = np.take_along_axis(block, part, axis=1)
            order = np.argsort(-values, axis=1, kind="stable")
            sims[start : start + step] = np.take_along_axis(values, order, axis=1)
            claims[start : start + step] = np.take_along_axis(part, order, axis=1)
        return sims, claims

    # ------------------------------------------------------- fitted-table protocol
    @classmethod
    def key_for(cls, settings: CaragSettings) -> str:
        return cls.key

    @classmethod
    def from_corpus(cls, settings: CaragSettings, corpus: TableCorpus) -> ClaimContrast:
        """The table of the corpus's evidence against its claims (``threshold`` from ``settings``).

        Raises:
            ValueError: the corpus has no claims.
        """
        if corpus.claim_units is None:
            raise ValueError("claim_contrast needs the corpus's claims: fit with claim_nodes=[...].")
        return cls(corpus.claim_units, threshold=settings.contrast_threshold).fit_blocks(corpus.evidence_blocks())

    def update(self, corpus: TableCorpus, changed: Sequence[str]) -> bool:
        """Changed passages leave the table (computed exactly when seen again); the table stays."""
        self.forget(changed)
        return True

    def sources(self, corpus: TableCorpus) -> list[CandidateSource]:
        return []

    def forget(self, node_ids: Sequence[str]) -> None:
        """Drop passages from the table (changed or deleted); they are computed exactly if seen again."""
        with self._lock:
            if any(i in self._rows for i in node_ids):
                rows = dict(self._rows)
                for i in node_ids:
                    rows.pop(i, None)
                self._rows = rows

    def with_threshold(self, threshold: float) -> ClaimContrast:
        """The same fitted table with another ``threshold`` (no refit)."""
        if float(threshold) == self.threshold:
            return self
        other = copy.copy(self)
        other.threshold = float(threshold)
        return other

    def scores(self, pool: CandidatePool, query: RankQuery) -> np.ndarray:
        """``c(n)`` of every candidate of ``pool`` (float64, shape ``(len(pool),)``)."""
        return self.contrast(pool.ids, pool.vectors(), query.unit, self.threshold).astype(np.float64)

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``({top, threshold, ids}, {"sims": (n, top), "claims": (n, top)})``."""
        rows = sorted(self._rows.items(), key=lambda kv: kv[1])
        info = {"top": self.top, "threshold": self.threshold, "ids": [i for i, _ in rows]}
        keep = np.array([r for _, r in rows], dtype=np.int64)
        return info, {"sims": self.sims_[keep], "claims": self.claims_[keep]}

    @classmethod
    def from_state(cls, info: dict[str, Any], arrays: dict[str, np.ndarray], corpus: TableCorpus) -> ClaimContrast:
        """The saved table, against the corpus's claims.

        Raises:
            ValueError: no claims, or arrays that do not match the ids or the claims.
        """
        if corpus.claim_units is None:
            raise ValueError("the state has a claim-contrast table but no claims")
        self = cls(corpus.claim_units, top=int(info["top"]), threshold=float(info["threshold"]))
        sims, claims = arrays["sims"], arrays["claims"]
        if sims.shape != (len(info["ids"]), self.top) or claims.shape != sims.shape:
            raise ValueError("The saved claim-contrast table does not match its ids.")
        if claims.size and int(claims.max()) >= self.claim_units.shape[0]:
            raise ValueError("The saved claim-contrast table names claims that are not in the state.")
        self.sims_, self.claims_ = sims.astype(np.float32), claims.astype(np.int32)
        self._rows = {node_id: r for r, node_id in enumerate(info["ids"])}
        return self

    def contrast(
        self, node_ids: Sequence[str], vectors: Sequence[np.ndarray | None], query_unit: np.ndarray, threshold: float
    ) -> np.ndarray:
        """``c(n)`` for each candidate.

        Args:
            node_ids: candidate ids, length ``k``.
            vectors: their unit vectors (``None`` where unknown), length ``k``.
            query_unit: the query as a unit vector, shape ``(d,)``.
            threshold: claims with cosine ``> threshold`` to the query are not competitors.

        Returns:
            shape ``(k,)``; ``0`` where no competitor is left or the vector is unknown.
        """
        out = np.zeros(len(node_ids), dtype=np.float32)
        excluded = np.einsum("ij,j->i", self.claim_units, query_unit) > threshold
        if excluded.all():
            return out
        rows_map = self._rows
        table_pos = [(i, rows_map.get(node_id)) for i, node_id in enumerate(node_ids) if vectors[i] is not None]
        known = [(i, r) for i, r in table_pos if r is not None]
        exact = [i for i, r in table_pos if r is None]
        if known:
            at = np.array([i for i, _ in known])
            rows = np.array([r for _, r in known])
            open_ = ~excluded[self.claims_[rows]]  # (k', top)
            found = open_.any(axis=1)
            first = open_.argmax(axis=1)
            out[at[found]] = self.sims_[rows[found], first[found]]
            exact += at[~found].tolist()
        if exact:
            others = self.claim_units[~excluded]
            # exact only holds candidates whose vector is known (see table_pos)
            block = np.stack([cast(np.ndarray, vectors[i]) for i in exact]).astype(np.float32, copy=False)
            # einsum, not a BLAS product: BLAS's worker threads would slow the next vector search.
            out[exact] = np.einsum("ij,kj->ik", block, others).max(axis=1)
        return out
