"""Reading the fitted tables of states saved before the fitted-table protocol (up to commit 603ae74).

Those states kept each table under its own key: ``claim_contrast_table`` (arrays
``contrast_sims`` / ``contrast_claims``), ``hubness_tables`` (one array ``hubness_{k}`` each) and
``lexical`` (the BM25 index in a side folder, written before the manifest, as bm25s's scores: not read, the
BM25 table is refitted from the stored text).  :func:`legacy_tables` turns them into today's tables; the next
``persist`` writes the new layout and removes the side folder.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.core.persistence import StateError
from llama_index_carag.ranking.contrast import ClaimContrast
from llama_index_carag.ranking.scorers import Hubness

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.ranking.tables import FittedTable, TableCorpus

logger = logging.getLogger(__name__)

__all__ = ["legacy_tables", "is_legacy_lexical_dir", "LEGACY_LEXICAL_SUBDIR"]

#: The sub-folder of the state folder where earlier versions wrote the BM25 index.
LEGACY_LEXICAL_SUBDIR = "lexical"
_LEGACY_LEXICAL_IDS = "carag_lexical_ids.json"


def is_legacy_lexical_dir(path: Path) -> bool:
    """True for a BM25 side folder written by an earlier version."""
    return (path / _LEGACY_LEXICAL_IDS).is_file()


def legacy_tables(
    info: dict[str, Any], arrays: dict[str, np.ndarray], folder: Path, corpus: TableCorpus
) -> dict[str, FittedTable]:
    """The tables of an earlier state, by today's keys (its BM25 folder is left out: refitted on first use).

    Raises:
        StateError: a saved table is unreadable.
    """
    tables: dict[str, FittedTable] = {}
    try:
        if "claim_contrast_table" in info and corpus.claim_units is not None:
            saved = {"sims": arrays["contrast_sims"], "claims": arrays["contrast_claims"]}
            tables[ClaimContrast.key] = ClaimContrast.from_state(info["claim_contrast_table"], saved, corpus)
        for h_info in info.get("hubness_tables", []):
            table = Hubness.from_state(h_info, {"hubness": arrays[h_info["array"]]}, corpus)
            tables[table.key] = table
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"A saved fitted table is unreadable ({exc}).") from None
    return tables
