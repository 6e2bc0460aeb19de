"""The hubness term's table: every passage's hubness ``r(n)``, the fitted per-passage table
(:class:`~llama_index_carag.ranking.fitted_table.FittedTable`: ``from_corpus`` / ``scores`` / ``get_state`` /
``from_state``) of the term ``- hub_penalty * r(n)`` (:data:`~llama_index_carag.ranking.assembly.HUBNESS`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.ranking.fitted_table import TableCorpus
    from llama_index_carag.ranking.pool import CandidatePool, RankQuery
    from llama_index_carag.ranking.sources import CandidateSource
    from llama_index_carag.settings import CaragSettings

logger = logging.getLogger(__name__)


class Hubness:
    """Hubness ``r(n)``: mean cosine of a passage to its ``k`` nearest evidence passages.

    "Hubs" — generic passages close to many others — crowd the top results of many
    unrelated queries; subtracting ``hub_penalty * r(n)`` (the local-scaling idea of CSLS)
    pushes them down.  Neighbours are taken among a random reference set of at most
    ``reference_size`` passages (all of them on small corpora); exact duplicates
    (cosine > 0.999) are ignored, so copies of one passage do not count as neighbours.

    A fitted table (:class:`~llama_index_carag.ranking.fitted_table.FittedTable`, key ``hubness_{k}``,
    one per ``hub_k``): every passage's ``r`` depends on all others, so an insert or delete refits it.

    Attributes (after :meth:`fit`):
        table_: ``{node id: r}``.
    """

    name = "hubness"

    def __init__(self, k: int = 20, *, reference_size: int = 5000, seed: int = 0) -> None:
        self.k = k
        self.reference_size = reference_size
        self.seed = seed

    def fit(self, node_ids: Sequence[str], unit_vectors: np.ndarray) -> Hubness:
        """Tabulate ``r`` for every passage (``unit_vectors`` of shape ``(n, d)``)."""
        unit = np.asarray(unit_vectors, dtype=np.float32)
        n = unit.shape[0]
        if n == 0:
            raise ValueError(
                "hub_penalty is not available on a Qdrant collection (it needs every passage's neighbours)."
            )
        rng = np.random.default_rng(self.seed)
        ref = unit if n <= self.reference_size else unit[np.sort(rng.choice(n, self.reference_size, replace=False))]
        kk = max(1, min(self.k, ref.shape[0] - 1))
        r = np.empty(n, dtype=np.float32)
        for start in range(0, n, 2048):
            sims = unit[start : start + 2048] @ ref.T
            sims[sims > 0.999] = -1.0  # itself and exact copies
            part = np.partition(sims, sims.shape[1] - kk, axis=1)[:, -kk:]
            r[start : start + 2048] = part.mean(axis=1)
        self.table_ = dict(zip(node_ids, r.tolist()))
        logger.debug("Hubness of %d passages (k=%d).", n, self.k)
        return self

    @property
    def key(self) -> str:
        return f"hubness_{self.k}"

    @classmethod
    def key_for(cls, settings: CaragSettings) -> str:
        return f"hubness_{settings.hub_k}"

    @classmethod
    def from_corpus(cls, settings: CaragSettings, corpus: TableCorpus) -> Hubness:
        """The hubness of the corpus's evidence for ``settings.hub_k`` (ValueError on Qdrant: no vectors in memory)."""
        return cls(settings.hub_k).fit(*corpus.evidence_units())

    def update(self, corpus: TableCorpus, changed: Sequence[str]) -> bool:
        return not changed  # any change moves every passage's neighbours: refit

    def sources(self, corpus: TableCorpus) -> list[CandidateSource]:
        return []

    def hubness(self, node_id: str) -> float | None:
        """``r`` of one passage, or ``None`` when it is not in the table."""
        return self.table_.get(node_id)

    def scores(self, pool: CandidatePool, query: RankQuery) -> np.ndarray:
        table = self.table_
        return np.array([table.get(i) or 0.0 for i in pool.ids], dtype=np.float64)

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        ids = list(self.table_)
        info = {"k": self.k, "reference_size": self.reference_size, "seed": self.seed, "ids": ids}
        return info, {"hubness": np.array([self.table_[i] for i in ids], dtype=np.float64)}

    @classmethod
    def from_state(
        cls, info: dict[str, Any], arrays: dict[str, np.ndarray], corpus: TableCorpus | None = None
    ) -> Hubness:
        self = cls(int(info["k"]), reference_size=int(info["reference_size"]), seed=int(info["seed"]))
        values = arrays["hubness"]
        if len(values) != len(info["ids"]):
            raise ValueError("The saved hubness table does not match its ids.")
        self.table_ = dict(zip(info["ids"], values.tolist()))
        return self
