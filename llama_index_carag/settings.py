"""``CaragSettings``: every option of CARAG retrieval, once, with its type, range and meaning.

One frozen pydantic model holds the options; the retriever, its persisted state,
the CLI, the postprocessor and the evaluation runner all take and store it.
``CaragSettings()`` is the package default (:data:`DEFAULT`, what
``ContextAwareRetriever.from_index`` uses); other presets are named instances
(:data:`PAPER`, the papers' method; :data:`TUNED`; all in :data:`PRESETS`).
Changing a setting makes a new object (``settings.replace(alpha=0.8)`` or
``retriever.with_settings(alpha=0.8)``).

Type errors raise ``TypeError``; values out of range raise ``ValueError``
(pydantic's ``ValidationError``, a ``ValueError``), whichever entry point is used.

Adding an option = one field here (plus the code that reads it).  The weight of a re-ranking term is a
field marked ``rerank_term`` whose range is declared as pydantic constraints (``ge``/``le``, read back by
:func:`weight_range`), or, for a term registered from outside the package, an entry of
:attr:`CaragSettings.extra_term_weights`; the term itself is one
:class:`~llama_index_carag.ranking.rerank_term.RerankTerm` in the registry of
:mod:`llama_index_carag.ranking.assembly`.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping
from numbers import Integral
from typing import Annotated, Any, Literal

from annotated_types import Ge, Le
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, model_validator
from pydantic.json_schema import JsonDict

from llama_index_carag.core.validation import (
    check_count,
    check_delta,
    check_interval,
    check_n_clusters,
    check_top_k,
    check_unit_interval,
)

logger = logging.getLogger(__name__)


def _positive(name: str) -> Any:
    return BeforeValidator(lambda v: check_top_k(v, name))


def _optional_positive(name: str) -> Any:
    return BeforeValidator(lambda v: None if v is None else check_top_k(v, name))


def _unit(name: str) -> Any:
    return BeforeValidator(lambda v: check_unit_interval(name, v))


def _declared_range(v: Any, info: ValidationInfo) -> float:
    """A number in the field's own declared ``ge``/``le`` range (read by :func:`weight_range`)."""
    name = str(info.field_name)
    low, high = weight_range(name)
    return check_interval(name, v, low, high)


def _cosine(name: str) -> Any:
    return BeforeValidator(lambda v: check_delta(v, name))


def _count(name: str) -> Any:
    return BeforeValidator(lambda v: check_count(v, name))


def _mode(v: Any) -> str:
    if v not in ("unsupervised", "supervised"):
        raise ValueError(f"mode must be 'unsupervised' or 'supervised'; got {v!r}.")
    return str(v)


def _bool(name: str) -> Any:
    def check(v: Any) -> bool:
        if not isinstance(v, (bool, Integral)):
            raise TypeError(f"{name} must be a boolean; got {type(v).__name__} {v!r}.")
        return bool(v)

    return BeforeValidator(check)


#: Marks a field as the weight of a re-ranking term: it needs ``rerank_candidates`` and counts in
#: :attr:`CaragSettings.penalties` (see :func:`term_weight_fields`).
_RERANK_TERM: JsonDict = {"rerank_term": True}


@functools.cache
def term_weight_fields() -> tuple[str, ...]:
    """The names of the fields marked as re-ranking-term weights, in declaration order."""
    return tuple(
        name
        for name, info in CaragSettings.model_fields.items()
        if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("rerank_term")
    )


def weight_range(name: str) -> tuple[float, float]:
    """``(low, high)`` of a settings field, from its declared ``ge``/``le`` constraints (``inf`` when none).

    Raises:
        KeyError: no such field.
    """
    low, high = -math.inf, math.inf
    for constraint in CaragSettings.model_fields[name].metadata:
        if isinstance(constraint, Ge):
            low = float(constraint.ge)  # type: ignore[arg-type]
        elif isinstance(constraint, Le):
            high = float(constraint.le)  # type: ignore[arg-type]
    return low, high


def _extra_weights(v: Any) -> dict[str, float]:
    if not isinstance(v, Mapping):
        raise TypeError(f"extra_term_weights must be a mapping of term name to weight; got {type(v).__name__}.")
    out: dict[str, float] = {}
    for name, weight in v.items():
        if not isinstance(name, str) or not name.replace("_", "").isalnum():
            raise ValueError(f"extra_term_weights: a term name is letters, digits and underscores; got {name!r}.")
        out[name] = check_interval(f"extra_term_weights[{name!r}]", weight, 0.0, math.inf)
    return dict(sorted(out.items()))


def _seed(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, Integral):
        raise TypeError(f"random_state must be an integer or None; got {type(v).__name__} {v!r}.")
    return int(v)


class CaragSettings(BaseModel):
    """The options of a :class:`~llama_index_carag.retrieval.retriever.ContextAwareRetriever` (frozen).

    The defaults are the package default (:data:`DEFAULT`: a hybrid pool re-ranked with the
    claim contrast); :data:`PAPER` is the papers' method.  ``mode``, ``n_clusters``,
    ``random_state`` and ``covariance_type`` are clustering (fit-time) options
    (:data:`FIT_FIELDS`); the others act per query or on fitted per-passage tables.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # ---- clustering (fit time)
    mode: Annotated[Literal["unsupervised", "supervised"], BeforeValidator(_mode)] = Field(
        "unsupervised",
        description="'unsupervised' (CARAG-u: clusters all claims and evidence, no labels) or 'supervised' "
        "(CARAG: clusters each theme and uses claim-evidence links).",
    )
    n_clusters: Annotated[int | Literal["auto"], BeforeValidator(check_n_clusters)] = Field(
        10, description="Clusters t (papers: 10), per theme in supervised mode, or 'auto' (BIC)."
    )
    random_state: Annotated[int | None, BeforeValidator(_seed)] = Field(0, description="Seed of the clustering.")
    covariance_type: Literal["full", "tied", "diag", "spherical"] = Field("diag", description="GMM covariance.")
    # ---- query
    alpha: Annotated[float, _unit("alpha")] = Field(
        0.8, description="Weight of the claim in the query, [0, 1] (1 = plain RAG; papers: 0.5)."
    )
    delta: Annotated[float, _cosine("delta")] = Field(
        0.75, description="SOI threshold: items with cosine > delta to the claim are kept, [-1, 1]."
    )
    similarity_top_k: Annotated[int, _positive("similarity_top_k")] = Field(
        6, description="Evidence passages returned."
    )
    soi_min_size: Annotated[int, _count("soi_min_size")] = Field(
        3,
        description="Keep at least this many SOI items, the cluster's most similar to the claim, when fewer pass "
        "delta (0: delta alone, as in the papers).",
    )
    soi_top_m: Annotated[int | None, _optional_positive("soi_top_m")] = Field(
        None,
        description="Keep at most this many SOI items, the most similar (None: all above delta, as in the papers).",
    )
    rerank_candidates: Annotated[int | None, _optional_positive("rerank_candidates")] = Field(
        50,
        description="None (papers): search with the blended vector alpha*q + (1-alpha)*T.  n: search with the "
        "claim vector for n candidates and re-rank them by alpha*sim(q, n) + (1-alpha)*sim(T, n) minus the penalties.",
    )
    dedupe: Annotated[bool, _bool("dedupe")] = Field(
        False, description="Return at most one passage per distinct text (case and spacing ignored)."
    )
    soi_claims: Annotated[int, _count("soi_claims")] = Field(
        0, description="(CARAG-u) also put the n claims of the cluster most similar to the query into the SOI."
    )
    hub_penalty: Annotated[float, BeforeValidator(_declared_range)] = Field(
        0.0,
        ge=0.0,
        le=1.0,
        json_schema_extra=_RERANK_TERM,
        description="lambda in '- lambda * r(n)', r = the passage's hubness (mean cosine to its hub_k nearest "
        "passages).  Needs rerank_candidates; 0 = off.",
    )
    hub_k: Annotated[int, _positive("hub_k")] = Field(20, description="Neighbours used for the hubness.")
    claim_contrast: Annotated[float, BeforeValidator(_declared_range)] = Field(
        0.45,
        ge=0.0,
        le=1.0,
        json_schema_extra=_RERANK_TERM,
        description="beta in '- beta * c(n)', c = the passage's cosine to the most similar other corpus claim.  "
        "Needs rerank_candidates and the corpus's claims; 0 = off.",
    )
    contrast_threshold: Annotated[float, _cosine("contrast_threshold")] = Field(
        0.9, description="Claims with cosine > this to the query count as the query itself in claim_contrast, [-1, 1]."
    )
    lexical_weight: Annotated[float, BeforeValidator(_declared_range)] = Field(
        0.6,
        ge=0.0,
        le=10.0,
        json_schema_extra=_RERANK_TERM,
        description="Weight of BM25 in '+ w * l(n)': the query's top rerank_candidates BM25 passages join the pool and "
        "l = the BM25 score min-max scaled in the pool, times the pool's spread of claim cosines (so w = 1 gives "
        "the best lexical match as much pull as the spread of dense scores).  Needs rerank_candidates; 0 = off "
        "(no BM25 index is built).",
    )
    extra_term_weights: Annotated[dict[str, float], BeforeValidator(_extra_weights)] = Field(
        default_factory=dict,
        description="Weights of re-ranking terms registered from outside the package (term name -> weight >= 0; "
        "each term's own range applies).  Need rerank_candidates; 0 or absent = off.",
    )

    @model_validator(mode="after")
    def _cross_field(self) -> CaragSettings:
        if self.rerank_candidates is None:
            for name, weight in self.term_weights().items():
                if weight:
                    raise ValueError(
                        f"{name} needs rerank_candidates (the candidates it re-ranks); set {name}=0 as well, "
                        "or start from PAPER (dense only): PAPER.replace(...)."
                    )
        return self

    def __hash__(self) -> int:  # frozen, with a dict field: hash the JSON form
        return hash(self.model_dump_json())

    # ------------------------------------------------------------------ helpers
    def term_weights(self) -> dict[str, float]:
        """Every re-ranking-term weight by name: the marked fields, then :attr:`extra_term_weights`."""
        return {**{name: float(getattr(self, name)) for name in term_weight_fields()}, **self.extra_term_weights}

    def replace(self, **changes: Any) -> CaragSettings:
        """A validated copy with ``changes`` applied."""
        return type(self).model_validate({**self.model_dump(), **changes})

    @property
    def penalties(self) -> bool:
        """True when a re-ranking term beyond the claim and its SOI (hubness, claim contrast, BM25, …) is on."""
        return any(weight > 0 for weight in self.term_weights().values())

    def fit_options(self) -> dict[str, Any]:
        """The clustering options (:data:`FIT_FIELDS`)."""
        return {name: getattr(self, name) for name in FIT_FIELDS}

    @classmethod
    def from_options(cls, base: CaragSettings | Mapping[str, Any] | str | None = None, **options: Any) -> CaragSettings:
        """Settings from a base (an instance, a mapping or a preset name; default :data:`DEFAULT`,
        the field defaults) plus options.

        Raises:
            TypeError: an unknown option name, or a value of the wrong type.
            ValueError: a value out of range, an unknown preset, or options that conflict.
        """
        unknown = sorted(set(options) - set(cls.model_fields))
        if unknown:
            raise TypeError(
                f"Unknown CARAG option(s) {', '.join(map(repr, unknown))}; known: {', '.join(cls.model_fields)}."
            )
        if base is None:
            start: dict[str, Any] = {}
        elif isinstance(base, str):
            if base not in PRESETS:
                raise ValueError(f"Unknown preset {base!r}; presets: {', '.join(PRESETS)}.")
            start = PRESETS[base].model_dump()
        elif isinstance(base, CaragSettings):
            start = base.model_dump()
        else:
            start = dict(base)
        return cls.model_validate({**start, **options})


#: Names of the clustering (fit-time) options: changing one of them means refitting.
FIT_FIELDS = ("mode", "n_clusters", "random_state", "covariance_type")

#: The package default, chosen by the rule declared in docs/RESULTS.md on tuning data only
#: (FactVer's tuning half, both encoders; SciFact's train claims in two halves): a hybrid pool
#: (the claim's 50 nearest passages and its 50 best BM25 passages), re-ranked by
#: ``alpha * sim(q) + (1 - alpha) * sim(T) + lexical_weight * l - claim_contrast * c``; the SOI behind ``T``
#: keeps at least the claim's 3 nearest cluster items (``soi_min_size``, docs/RESULTS.md §0.6), so every
#: claim has one.  It is ``CaragSettings()``: the field defaults.
DEFAULT = CaragSettings()

#: The papers' settings (alpha 0.5, delta 0.75, t 10, k 6; the blended query searched, dense only).
PAPER = DEFAULT.replace(alpha=0.5, soi_min_size=0, rerank_candidates=None, lexical_weight=0.0, claim_contrast=0.0)

#: The CARAG-u variant chosen on FactVer's tuning half (both encoders, fixed rule; see
#: docs/RESULTS.md): re-rank the claim's 50 nearest passages with its SOI (one related claim
#: added) and push down passages that sit closer to another corpus claim (``claim_contrast``).
#: It does not meet the "beat RAG by 2 points" target there either.
TUNED = PAPER.replace(alpha=0.8, rerank_candidates=50, soi_claims=1, claim_contrast=0.1, contrast_threshold=0.8)


def package_default(settings: CaragSettings | str | None, has_claims: bool) -> CaragSettings | str:
    """``settings``, or the package default: :data:`DEFAULT`, without claim contrast when there are no claims."""
    if settings is not None:
        return settings
    if has_claims:
        return DEFAULT
    logger.info("No claim_nodes: the default settings run without claim contrast (it compares passages with claims).")
    return DEFAULT.replace(claim_contrast=0.0)


#: Presets by name (``carag index --preset NAME``).
PRESETS: dict[str, CaragSettings] = {"default": DEFAULT, "paper": PAPER, "tuned": TUNED}


class SettingsView:
    """Mixin: one read-only attribute per settings field (``obj.alpha`` is ``obj._settings.alpha``).

    Assigning one raises ``AttributeError`` that points to ``with_settings``: settings are frozen.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, info in CaragSettings.model_fields.items():
            if name not in cls.__dict__:
                setattr(cls, name, property(_getter(name), _frozen(name), doc=info.description))


def _getter(name: str) -> Any:
    return lambda self: getattr(self._settings, name)


def _frozen(name: str) -> Any:
    def setter(self: Any, value: Any) -> None:
        raise AttributeError(
            f"The retriever's settings are frozen; use retriever.with_settings({name}={value!r}), "
            "which returns a retriever with the new settings (fitting what they need)."
        )

    return setter
