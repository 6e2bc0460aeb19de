"""The registry of re-ranking terms, and what a retriever's settings ask of it: tables, sources, scorers.

:func:`rerank_terms` lists the terms (:class:`~llama_index_carag.ranking.rerank_term.RerankTerm`), in the
order the stage applies them: BM25 (:data:`LEXICAL`), hubness (:data:`HUBNESS`), claim contrast
(:data:`CLAIM_CONTRAST`), then any registered with :func:`register_term` (or, for a while,
:func:`registered_term`).  Every function here loops over the registry or over a corpus's ``tables`` dict, and so
do fitting, calibration, persistence, the retriever and the postprocessor: none of them names a term.

A new term of the package = its weight field in :class:`~llama_index_carag.settings.CaragSettings` (marked
``rerank_term``, with its range) + its scorer (and table, if it fits one) + one :class:`RerankTerm` here.
A term from outside the package is registered at run time and weighted by ``settings.extra_term_weights``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from llama_index_carag.ranking.bm25 import BM25Relevance, BM25Table, bm25_source, lexical_provenance
from llama_index_carag.ranking.contrast import ClaimContrast
from llama_index_carag.ranking.fitted_table import FittedTable, TableCorpus, check_table_key
from llama_index_carag.ranking.hubness import Hubness
from llama_index_carag.ranking.rerank_term import RerankTerm, TermValues
from llama_index_carag.ranking.sources import CandidateSource, DenseSource
from llama_index_carag.ranking.stage import Scorer

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from llama_index_carag.ranking.pool import CandidatePool, RankQuery
    from llama_index_carag.settings import CaragSettings

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------ the package's terms
def _lexical_values(settings: CaragSettings, table: Any, sources: Sequence[CandidateSource]) -> TermValues | None:
    source = bm25_source(sources)  # the scores of the BM25 source's cached pass
    return None if source is None else BM25Relevance(source)


def _lexical_details(
    sources: Sequence[CandidateSource], pool: CandidatePool, query: RankQuery, n: int
) -> Callable[[int], dict] | None:
    source = bm25_source(sources)
    return None if source is None else lexical_provenance(source, pool, query.query_str, n)


def _contrast_values(settings: CaragSettings, table: Any, sources: Sequence[CandidateSource]) -> TermValues:
    return table.with_threshold(settings.contrast_threshold)


def _contrast_leave_one_out(settings: CaragSettings) -> None:
    if settings.contrast_threshold >= 0.999:
        raise ValueError(
            "Calibration needs contrast_threshold < 0.999: a left-out claim's own vector (cosine 1) must "
            "count as the query itself in the claim-contrast table."
        )


#: ``+ lexical_weight * l(n)``: BM25 joins the pool and scores it (:mod:`llama_index_carag.ranking.bm25`).
LEXICAL = RerankTerm(
    "lexical",
    _lexical_values,
    field="lexical_weight",
    grid=(0.0, 0.5, 1.0, 2.0),
    table=BM25Table,
    details=_lexical_details,
)
#: ``- hub_penalty * r(n)``: the passage's hubness (:class:`~llama_index_carag.ranking.hubness.Hubness`).
HUBNESS = RerankTerm("hubness", lambda settings, table, sources: table, sign=-1.0, field="hub_penalty", table=Hubness)
#: ``- claim_contrast * c(n)``: the cosine to the nearest other corpus claim
#: (:class:`~llama_index_carag.ranking.contrast.ClaimContrast`).
CLAIM_CONTRAST = RerankTerm(
    "claim_contrast",
    _contrast_values,
    sign=-1.0,
    field="claim_contrast",
    grid=(0.0, 0.5, 1.0, 2.0),
    table=ClaimContrast,
    needs_claims=True,
    leave_one_out_check=_contrast_leave_one_out,
)

_lock = threading.Lock()
_TERMS: dict[str, RerankTerm] = {term.name: term for term in (LEXICAL, HUBNESS, CLAIM_CONTRAST)}


# ------------------------------------------------------------------------------------------- registry
def rerank_terms() -> tuple[RerankTerm, ...]:
    """The registered terms, in the order the stage applies them."""
    return tuple(_TERMS.values())


def register_term(term: RerankTerm) -> RerankTerm:
    """Add a term after the others (its table type is then fitted, updated and persisted like theirs).

    Raises:
        ValueError: a term of that name, or a table of that type name, is registered already.
    """
    with _lock:
        if term.name in _TERMS:
            raise ValueError(f"A re-ranking term named {term.name!r} is registered already.")
        if term.table is not None and any(
            t.table is not None and t.table.name == term.table.name for t in _TERMS.values()
        ):
            raise ValueError(f"A fitted table of type {term.table.name!r} is registered already.")
        _TERMS[term.name] = term
    return term


def unregister_term(name: str) -> RerankTerm:
    """Remove a registered term (``KeyError`` when there is none of that name)."""
    with _lock:
        return _TERMS.pop(name)


@contextmanager
def registered_term(term: RerankTerm) -> Iterator[RerankTerm]:
    """``with registered_term(term): ...`` — the term is registered inside the block only."""
    register_term(term)
    try:
        yield term
    finally:
        unregister_term(term.name)


def active_terms(settings: CaragSettings) -> list[RerankTerm]:
    """The terms ``settings`` switch on (weight > 0), in registry order."""
    return [term for term in rerank_terms() if term.is_on(settings)]


def table_type(name: str) -> type[FittedTable]:
    """The table class saved under ``name``.

    Raises:
        KeyError: no registered term has such a table.
    """
    types = [term.table for term in rerank_terms() if term.table is not None]
    for cls in types:
        if cls.name == name:
            return cls
    raise KeyError(f"unknown fitted table type {name!r} (known: {', '.join(c.name for c in types)})")


# ------------------------------------------------------------------------------------------ fitted tables
def wanted_tables(settings: CaragSettings) -> dict[str, type[FittedTable]]:
    """``{key: table class}`` of the tables ``settings`` use."""
    out: dict[str, type[FittedTable]] = {}
    for term in active_terms(settings):
        key = term.table_key(settings)
        if key is not None and term.table is not None:
            out[check_table_key(key)] = term.table
    return out


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


# ------------------------------------------------------------------------------------- sources and scorers
def term_sources(
    settings: CaragSettings, tables: Mapping[str, FittedTable], corpus: TableCorpus
) -> list[CandidateSource]:
    """The candidate sources the fitted tables of the active terms add (BM25 when ``lexical_weight > 0``)."""
    keys = dict.fromkeys(term.table_key(settings) for term in active_terms(settings))
    return [src for key in keys if key is not None and key in tables for src in tables[key].sources(corpus)]


def default_sources(
    index: VectorStoreIndex,
    embed_model: BaseEmbedding,
    corpus: TableCorpus,
    tables: Mapping[str, FittedTable],
    settings: CaragSettings,
    *,
    native_async: bool | None = None,
) -> list[CandidateSource]:
    """The dense vector-store search, plus the sources of the active terms' tables.

    ``native_async``: whether the store's own async search is usable (the vector-store adapter knows).
    """
    excluded: Callable[[], frozenset[str]] = lambda: corpus.exclude_ids  # noqa: E731 - read per query, it grows
    dense: CandidateSource = DenseSource(index, embed_model, excluded, native_async=native_async)
    return [dense, *term_sources(settings, tables, corpus)]


def settings_scorers(
    settings: CaragSettings, tables: Mapping[str, FittedTable], sources: Sequence[CandidateSource]
) -> list[Scorer]:
    """The active terms as the stage's scorers (beyond claim and thematic similarity), in registry order."""
    return [scorer for term in active_terms(settings) for scorer in term.scorers(settings, tables, sources)]


def term_details(
    settings: CaragSettings, sources: Sequence[CandidateSource], pool: CandidatePool, query: RankQuery, n: int
) -> Callable[[int], dict[str, Any]] | None:
    """``row -> {key: value}``: the extra provenance of the active terms (BM25's raw score and rank), or ``None``."""
    parts = [
        part
        for term in active_terms(settings)
        if term.details is not None and (part := term.details(sources, pool, query, n)) is not None
    ]
    if not parts:
        return None
    return lambda row: {key: value for part in parts for key, value in part(row).items()}
