"""An LLM's label lean on one archive's evidence, measured without labels, then divided out.

The content-free prior (:mod:`~llama_index_carag.verdicts.labels.stance`) removes what a model says
about *nothing*.  Across domains the larger error is the lean a model has on *this* domain's
evidence: the same 1.5B model said REFUTED for two in three balanced FactVer claims and SUPPORTED
for most SciFact ones.  :class:`DomainLabelPrior` measures that lean on claims the archive already
holds (its corpus claims and their evidence), **without reading any label**: the mean label
probabilities of the whole-evidence prompt and of the per-passage stance prompt over a sample of
them.  Divided out (Zhao et al., 2021's form, with the domain's mean in place of a content-free
input; "batch calibration", Zhou et al., 2024, estimated on the archive instead of the batch being
checked), a domain whose evidence the model reads as mostly refuting no longer gets mostly REFUTED.

It is a fitted component: :meth:`DomainLabelPrior.fit` scores ``n_claims`` archive claims once (the
LLM calls of about ``n_claims`` verdicts); per verdict the correction is a subtraction of three
numbers.  Persisted as JSON (:meth:`save` / :meth:`load`), keyed by the LLM's name.

Caveat, measured in docs/VERDICTS.md: the correction assumes the archive's claims are not
overwhelmingly of one label; an archive of only true claims would teach the model to doubt them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from llama_index_carag.verdicts.labels.stance import STANCE_ORDER, calibrated, label_probabilities
from llama_index_carag.verdicts.types import VerdictLabel

logger = logging.getLogger(__name__)

__all__ = ["DomainLabelPrior", "PRIOR_FILE", "mean_probabilities", "prior_for", "saved_prior", "index_prior"]

#: File name of a persisted prior inside an index's persist directory.
PRIOR_FILE = "verdict_prior.json"
_FORMAT = "carag-domain-label-prior/1"


def mean_probabilities(logprobs: Sequence[Mapping[VerdictLabel, float]]) -> dict[VerdictLabel, float]:
    """The mean softmax label probabilities of ``logprobs`` (n score dicts) -> ``{label: probability}``."""
    if not logprobs:
        raise ValueError("mean_probabilities needs at least one set of label scores.")
    probs = [label_probabilities(lp) for lp in logprobs]
    return {k: float(np.mean([p[k] for p in probs])) for k in STANCE_ORDER}


class DomainLabelPrior(BaseEstimator):
    """The label lean of an LLM on one archive's evidence (scikit-learn style: parameters, then ``fit``).

    Args:
        n_claims: how many archive claims to score (sampled with ``random_state``, never by label).
        random_state: seed of the sample (``None``: the first ``n_claims`` in the given order).
        stances: also measure the per-passage stance prompt (the ``"stance"`` decision reads it).

    Fitted attributes: ``joint_`` and ``stance_`` (``{label: mean probability}``; ``stance_`` ``None``
    without ``stances``), ``n_claims_`` (claims scored), ``n_passages_``, ``model_`` (the LLM's name).
    """

    _parameter_constraints: dict = {
        "n_claims": [Interval(Integral, 1, None, closed="left")],
        "random_state": [Interval(Integral, 0, None, closed="left"), None],
        "stances": ["boolean"],
    }

    def __init__(self, n_claims: int = 30, random_state: int | None = 0, stances: bool = True) -> None:
        self.n_claims = n_claims
        self.random_state = random_state
        self.stances = stances

    def sample_order(self, n: int) -> np.ndarray:
        """Which of ``n`` claims are scored, in order: ``min(n_claims, n)`` indices (seeded; never by label)."""
        self._validate_params()
        order = np.arange(n) if self.random_state is None else np.random.default_rng(self.random_state).permutation(n)
        return order[: self.n_claims]

    def fit(self, synthesizer: Any, claims: Sequence[tuple[str, Sequence[Any]]]) -> DomainLabelPrior:
        """Score a sample of ``claims`` (``(claim text, evidence NodeWithScore list)``) with ``synthesizer``.

        ``synthesizer``: a :class:`~llama_index_carag.verdicts.synthesizer.FactCheckSynthesizer` in
        ``"score"`` mode.  Claims without evidence are skipped.  No label is read.
        """
        from tqdm.auto import tqdm

        from llama_index_carag.models.resolve import llm_name

        self._validate_params()
        usable = [(c, list(nodes)) for c, nodes in claims if nodes]
        if not usable:
            raise ValueError("DomainLabelPrior.fit needs at least one claim with evidence.")
        sample = [usable[i] for i in self.sample_order(len(usable))]
        joints: list[Mapping[VerdictLabel, float]] = []
        passages: list[Mapping[VerdictLabel, float]] = []
        for claim, nodes in tqdm(sample, desc="Measuring the archive's label lean", unit="claim"):
            joints.append(synthesizer.score_labels(claim, nodes).logprobs)
            if self.stances:
                passages.extend(s.logprobs for s in synthesizer.score_stances(claim, nodes))
        self.joint_ = mean_probabilities(joints)
        self.stance_ = mean_probabilities(passages) if passages else None
        self.n_claims_, self.n_passages_ = len(sample), len(passages)
        self.model_ = llm_name(synthesizer._llm)
        logger.info("archive label lean of %s over %d claims: %s", self.model_, self.n_claims_, self.summary())
        return self

    def summary(self) -> dict[str, Any]:
        """``{"joint": {label: p}, "stance": {label: p} | None, "claims", "passages", "model"}`` (JSON-ready)."""
        check_is_fitted(self, "joint_")

        def plain(d: Mapping[VerdictLabel, float] | None) -> dict[str, float] | None:
            return None if d is None else {k.value: float(v) for k, v in d.items()}

        return {
            "joint": plain(self.joint_),
            "stance": plain(self.stance_),
            "claims": self.n_claims_,
            "passages": self.n_passages_,
            "model": self.model_,
        }

    def check_model(self, name: str) -> None:
        """Raise ``ValueError`` unless this lean was measured for the LLM called ``name``."""
        check_is_fitted(self, "joint_")
        if self.model_ != name:
            raise ValueError(
                f"This label prior was measured for {self.model_!r}, not for {name!r}; "
                "fit one for this LLM (carag index --calibrate or carag calibrate-verdicts)."
            )

    def correct_joint(self, logprobs: Mapping[VerdictLabel, float]) -> dict[VerdictLabel, float]:
        """Whole-evidence label probabilities with the archive's lean divided out (all three labels)."""
        check_is_fitted(self, "joint_")
        return calibrated(logprobs, self.joint_, STANCE_ORDER)

    # ------------------------------------------------------------------ persistence
    def get_state(self) -> dict[str, Any]:
        """The JSON form: parameters and fitted state."""
        params = {"n_claims": self.n_claims, "random_state": self.random_state, "stances": self.stances}
        return {"format": _FORMAT, "params": params, **self.summary()}

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> DomainLabelPrior:
        """Inverse of :meth:`get_state` (raises ``ValueError`` on another format or missing labels)."""
        if data.get("format") != _FORMAT:
            raise ValueError(f"Not a {_FORMAT} file (format {data.get('format')!r}).")
        prior = cls(**data["params"])

        def labels(d: Mapping[str, float] | None) -> dict[VerdictLabel, float] | None:
            if d is None:
                return None
            out = {VerdictLabel(k): float(v) for k, v in d.items()}
            if set(out) != set(STANCE_ORDER) or any(v <= 0 for v in out.values()):
                raise ValueError(f"A label prior needs a positive probability for each label; got {dict(d)}.")
            return out

        joint = labels(data["joint"])
        if joint is None:
            raise ValueError("A label prior needs its whole-evidence probabilities ('joint').")
        prior.joint_, prior.stance_ = joint, labels(data.get("stance"))
        prior.n_claims_, prior.n_passages_ = int(data["claims"]), int(data["passages"])
        prior.model_ = str(data["model"])
        return prior

    def persist(self, persist_dir: str | Path) -> Path:
        """Write ``<persist_dir>/verdict_prior.json`` atomically (an index's persist dir); returns the file."""
        from llama_index_carag.core.atomic import atomic_write_text

        path = Path(persist_dir) / PRIOR_FILE
        atomic_write_text(path, json.dumps(self.get_state(), indent=2))
        return path

    @classmethod
    def from_persist_dir(cls, persist_dir: str | Path) -> DomainLabelPrior:
        """Read the prior :meth:`persist` wrote in ``persist_dir``.

        Raises:
            ValueError: no readable prior there, another format, or a label without a positive probability.
        """
        path = Path(persist_dir) / PRIOR_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"Cannot read a label prior from {path}: {exc}") from exc
        return cls.from_state(data)


def prior_for(prior: DomainLabelPrior | None, llm: Any) -> DomainLabelPrior | None:
    """``prior`` if it was measured for ``llm`` (by :func:`~llama_index_carag.models.resolve.llm_name`), else
    ``None`` with a one-line warning: a lean measured on one model says nothing about another."""
    from llama_index_carag.models.resolve import llm_name

    if prior is None:
        return None
    name = llm_name(llm)
    if prior.model_ != name:
        logger.warning(
            "The archive's label prior was measured for %s, not %s: not used (re-run carag calibrate-verdicts).",
            prior.model_,
            name,
        )
        return None
    return prior


def saved_prior(persist_dir: str | Path) -> DomainLabelPrior | None:
    """The prior saved in an index's persist directory, whatever its LLM (``None`` if there is none)."""
    folder = Path(persist_dir)
    return DomainLabelPrior.from_persist_dir(folder) if (folder / PRIOR_FILE).is_file() else None


def index_prior(persist_dir: str | Path, llm: Any) -> DomainLabelPrior | None:
    """The prior saved in an index's persist directory for ``llm`` (``None`` if there is none, or for another LLM)."""
    return prior_for(saved_prior(persist_dir), llm)
