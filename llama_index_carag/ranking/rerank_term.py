"""``RerankTerm``: one re-ranking term, declared once — its weight, range, calibration grid, table and scorer.

The stage ranks by ``alpha * sim(q, n) + (1 - alpha) * sim(T, n) + sum(sign * weight * term(n))`` over the
terms that are on.  A :class:`RerankTerm` holds everything about one of them:

* its **weight**: a :class:`~llama_index_carag.settings.CaragSettings` field marked ``rerank_term``
  (``field``), whose range is the field's declared ``ge``/``le`` — or, for a term registered from outside
  the package, the entry ``settings.extra_term_weights[name]`` and the range ``[0, high]`` the term declares;
  the term is on when its weight is above 0;
* its **sign**: ``+1`` for a bonus (BM25), ``-1`` for a penalty (hubness, claim contrast);
* its **calibration grid**: the multiples of the preset's weight the per-corpus calibration tries (none: the
  weight is not calibrated);
* its optional **fitted table** (:class:`~llama_index_carag.ranking.fitted_table.FittedTable`: fitted once on
  the corpus, then cheap per query; it may add candidate sources);
* its **scorer**: ``scorer(settings, table, sources)`` gives the per-query term values (anything with
  ``scores(pool, query)``), or ``None`` when the sources lack what it needs;
* its **provenance key** (``name``): the key of its value in ``node.metadata["carag"]["terms"]``; ``details``
  may add more provenance keys per candidate.

The registry of terms (ordered) is in :mod:`llama_index_carag.ranking.assembly`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from llama_index_carag.settings import CaragSettings, term_weight_fields, weight_range

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_carag.ranking.fitted_table import FittedTable
    from llama_index_carag.ranking.pool import CandidatePool, RankQuery
    from llama_index_carag.ranking.sources import CandidateSource

logger = logging.getLogger(__name__)

#: The stage's own terms (claim and thematic similarity, weighted by ``alpha``): no registered term takes their names.
BASE_TERMS = ("dense", "thematic")


class TermValues(Protocol):
    """What a term's scorer gives per query: the term's value for every candidate."""

    def scores(self, pool: CandidatePool, query: RankQuery) -> np.ndarray:
        """Shape ``(len(pool),)``."""
        ...


#: ``scorer(settings, table, sources)``: the term's values for these settings (``table`` is ``None`` for a term
#: without one), or ``None`` when ``sources`` lack what the term reads.
ScorerFactory = Callable[[CaragSettings, Any, Sequence["CandidateSource"]], "TermValues | None"]
#: ``details(sources, pool, query, n)``: ``row -> {provenance key: value}`` for every candidate, or ``None``.
DetailsFactory = Callable[
    [Sequence["CandidateSource"], "CandidatePool", "RankQuery", int], "Callable[[int], dict] | None"
]


@dataclass(frozen=True)
class RerankTerm:
    """One re-ranking term (see the module docstring).

    Args:
        name: the provenance key (``metadata["carag"]["terms"][name]``); letters, digits and underscores.
        scorer: ``scorer(settings, table, sources) -> TermValues | None``.
        sign: ``+1.0`` (a bonus) or ``-1.0`` (a penalty).
        field: the :class:`CaragSettings` field holding the weight (marked ``rerank_term``); ``None``: the weight
            is ``settings.extra_term_weights[name]`` (a term registered from outside the package).
        high: the weight's upper bound when ``field`` is ``None`` (a field's own ``le`` otherwise).
        grid: multiples of the preset's weight the calibration tries (empty: not calibrated).
        table: the fitted per-passage table the term reads, if any.
        needs_claims: the term compares passages with the corpus's claims (fitting without claims is refused).
        details: more provenance per candidate (``details(sources, pool, query, n)``).
        leave_one_out_check: raises ``ValueError`` when leave-one-out calibration cannot score the term with
            these settings.
    """

    name: str
    scorer: ScorerFactory
    sign: float = 1.0
    field: str | None = None
    high: float | None = None
    grid: tuple[float, ...] = ()
    table: type[FittedTable] | None = None
    needs_claims: bool = False
    details: DetailsFactory | None = None
    leave_one_out_check: Callable[[CaragSettings], None] | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"A term's name is letters, digits and underscores; got {self.name!r}.")
        if self.name in BASE_TERMS:
            raise ValueError(f"{self.name!r} is the stage's own term.")
        if self.sign not in (1.0, -1.0):
            raise ValueError(f"A term's sign is +1 or -1; got {self.sign!r}.")
        if self.field is not None:
            if self.field not in term_weight_fields():
                raise ValueError(f"{self.field!r} is not a CaragSettings field marked as a re-ranking-term weight.")
            if self.high is not None:
                raise ValueError(f"Term {self.name!r}: the range of {self.field} is the field's own.")
        elif self.name in CaragSettings.model_fields:
            raise ValueError(f"Term {self.name!r} would shadow the CaragSettings field of that name.")
        if any(not math.isfinite(f) or f < 0 for f in self.grid):
            raise ValueError(f"Term {self.name!r}: grid factors are finite and >= 0; got {self.grid!r}.")

    # ------------------------------------------------------------------ weight
    @property
    def weight_name(self) -> str:
        """The weight's name: its settings field, or the term's name (in ``extra_term_weights``)."""
        return self.field or self.name

    def weight_range(self) -> tuple[float, float]:
        """``(low, high)`` of the weight."""
        if self.field is not None:
            return weight_range(self.field)
        return 0.0, math.inf if self.high is None else float(self.high)

    def weight(self, settings: CaragSettings) -> float:
        """The weight ``settings`` give the term (``0``: off).

        Raises:
            ValueError: an extra term's weight outside its range.
        """
        if self.field is not None:
            return float(getattr(settings, self.field))
        value = float(settings.extra_term_weights.get(self.name, 0.0))
        low, high = self.weight_range()
        if not low <= value <= high:
            raise ValueError(f"extra_term_weights[{self.name!r}] must be in [{low:g}, {high:g}]; got {value!r}.")
        return value

    def is_on(self, settings: CaragSettings) -> bool:
        return self.weight(settings) > 0

    def with_weight(self, settings: CaragSettings, value: float) -> CaragSettings:
        """``settings`` with this term's weight set to ``value`` (clipped to the range)."""
        low, high = self.weight_range()
        value = min(high, max(low, float(value)))
        if self.field is not None:
            return settings.replace(**{self.field: value})
        return settings.replace(extra_term_weights={**settings.extra_term_weights, self.name: value})

    # ------------------------------------------------------------------ per query
    def table_key(self, settings: CaragSettings) -> str | None:
        """The key of the fitted table ``settings`` use for this term (``None``: no table)."""
        return None if self.table is None else self.table.key_for(settings)

    def scorers(
        self, settings: CaragSettings, tables: Mapping[str, FittedTable], sources: Sequence[CandidateSource]
    ) -> list[TermScorer]:
        """The term as the stage's scorer (none when its table is not fitted or the sources lack what it reads)."""
        key = self.table_key(settings)
        if key is not None and key not in tables:
            return []
        values = self.scorer(settings, None if key is None else tables[key], sources)
        return [] if values is None else [TermScorer(self, values)]


class TermScorer:
    """A registered term as a :class:`~llama_index_carag.ranking.stage.Scorer`: its values, weighted
    ``sign * weight(settings)``, written into the provenance under the term's name.

    Attributes:
        term: the :class:`RerankTerm`.
        values: what its scorer gave (the fitted table itself, or an object reading it).
    """

    def __init__(self, term: RerankTerm, values: TermValues) -> None:
        self.term = term
        self.values = values
        self.name = term.name

    def scores(self, pool: CandidatePool, query: RankQuery) -> np.ndarray:
        return self.values.scores(pool, query)

    def weight(self, settings: CaragSettings, query: RankQuery) -> float:
        return self.term.sign * self.term.weight(settings)
