"""Which fitted tables, candidate sources and scorers a retriever's settings ask for (one place to add one).

:data:`TABLE_TYPES` lists the fitted per-passage tables
(:class:`~llama_index_carag.ranking.tables.FittedTable`); every function here loops over it or
over a corpus's ``tables`` dict, so none names a particular term.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING

from llama_index_carag.ranking.bm25 import BM25Table, bm25_source
from llama_index_carag.ranking.contrast import ClaimContrast
from llama_index_carag.ranking.protocols import CandidateSource, Scorer
from llama_index_carag.ranking.scorers import Hubness
from llama_index_carag.ranking.sources import DenseSource
from llama_index_carag.ranking.tables import FittedTable, TableCorpus, check_table_key

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from llama_index_carag.settings import CaragSettings

logger = logging.getLogger(__name__)

__all__ = [
    "TABLE_TYPES",
    "table_type",
    "wanted_tables",
    "active_tables",
    "fit_tables",
    "update_tables",
    "default_sources",
    "bm25_source",
    "settings_scorers",
]

#: The fitted per-passage tables, in the order their scorers are applied.  A new fitted term:
#: its weight field in CaragSettings (``json_schema_extra={"rerank_term": True}``) + its class here.
TABLE_TYPES: tuple[type[FittedTable], ...] = (BM25Table, Hubness, ClaimContrast)


def table_type(name: str) -> type[FittedTable]:
    """The table class saved under ``name``.

    Raises:
        KeyError: no such table type in this version.
    """
    for cls in TABLE_TYPES:
        if cls.name == name:
            return cls
    raise KeyError(f"unknown fitted table type {name!r} (known: {', '.join(c.name for c in TABLE_TYPES)})")


def wanted_tables(settings: CaragSettings) -> dict[str, type[FittedTable]]:
    """``{key: table class}`` of the tables ``settings`` use."""
    out: dict[str, type[FittedTable]] = {}
    for cls in TABLE_TYPES:
        key = cls.key_for(settings)
        if key is not None:
            out[check_table_key(key)] = cls
    return out


def active_tables(settings: CaragSettings, tables: Mapping[str, FittedTable]) -> list[FittedTable]:
    """The fitted tables ``settings`` use, in :data:`TABLE_TYPES` order (those not fitted left out)."""
    return [tables[key] for key in wanted_tables(settings) if key in tables]


def fit_tables(corpus: TableCorpus, tables: MutableMapping[str, FittedTable], settings: CaragSettings) -> list[str]:
    """Fit the tables ``settings`` use that ``tables`` lacks (a no-op when all are fitted); the keys fitted.

    Raises:
        ValueError: the corpus lacks what a table needs (see each table's ``from_corpus``).
    """
    fitted = []
    for key, cls in wanted_tables(settings).items():
        if key not in tables:
            table = cls.from_corpus(settings, corpus)
            if table.key != key:
                raise ValueError(f"{cls.__name__}.from_corpus gave a table keyed {table.key!r}, not {key!r}.")
            tables[key] = table
            fitted.append(key)
    if fitted:
        logger.debug("Fitted tables: %s", ", ".join(fitted))
    return fitted


def update_tables(corpus: TableCorpus, tables: MutableMapping[str, FittedTable], changed: Sequence[str]) -> list[str]:
    """Tell every table that the ``changed`` passages were inserted, replaced or deleted; the tables that
    cannot update in place are dropped (:func:`fit_tables` refits them); returns their keys."""
    dropped = [key for key, table in list(tables.items()) if not table.update(corpus, changed)]
    for key in dropped:
        del tables[key]
    return dropped


def default_sources(
    index: VectorStoreIndex,
    embed_model: BaseEmbedding,
    corpus: TableCorpus,
    tables: Mapping[str, FittedTable],
    settings: CaragSettings,
    *,
    native_async: bool | None = None,
) -> list[CandidateSource]:
    """The dense vector-store search, plus the sources of the tables in use (BM25 when ``lexical_weight > 0``).

    ``native_async``: whether the store's own async search is usable (the vector-store adapter knows).
    """
    excluded: Callable[[], frozenset[str]] = lambda: corpus.exclude_ids  # noqa: E731 - read per query, it grows
    sources: list[CandidateSource] = [DenseSource(index, embed_model, excluded, native_async=native_async)]
    for table in active_tables(settings, tables):
        sources += table.sources(corpus)
    return sources


def settings_scorers(
    settings: CaragSettings, tables: Mapping[str, FittedTable], sources: Sequence[CandidateSource]
) -> list[Scorer]:
    """The re-ranking terms beyond claim and thematic similarity that ``settings`` switch on."""
    out: list[Scorer] = []
    for table in active_tables(settings, tables):
        out += table.scorers(settings, sources)
    return out
