"""Verdict decisions compared on the same cached LLM outputs, two labelled domains (``python -m research.eval --verdicts``).

The LLM outputs are collected once (:mod:`research.verdict_cache`); every
decision here is replayed on them, so they differ only in how the label is decided.

**Declared before any report number was seen** (this docstring was written first):

* The decision of the package (``stance``): each passage's label log-likelihoods from its own stance
  prompt; the SUPPORTED/REFUTED lean of the model's content-free prior divided out (three
  content-free inputs, mean probabilities, per model; NOT_ENOUGH_INFO left as scored,
  :func:`~llama_index_carag.verdicts.labels.stance.calibrated`); each passage's stance = its most
  probable label; the claim's label by
  :func:`~llama_index_carag.verdicts.decision.strongest_stance` (strongest supporting passage against
  strongest refuting one; NOT_ENOUGH_INFO when no passage takes a side).  Nothing is fitted.
* Compared side by side on the same outputs: ``argmax`` (whole-evidence prompt, the plain arg-max),
  ``rule`` (the FactVer-fitted ``EvidenceLabelRule``, as shipped), and three variants of the stance
  decision, reported but not chosen from: no calibration (``stance-raw``), Zhao et al.'s full
  three-label calibration (``stance-full``), and the claim's own prior (the stance prompt with the
  claim and passage ``"N/A"``; ``stance-claim``).
* One fitted variant, chosen leave-one-domain-out: ``stance-margin`` — a passage takes a side only
  when its side's calibrated probability beats NOT_ENOUGH_INFO's by a margin ``m`` (grid 0 … 0.5),
  ``m`` fitted for macro-F1 on the *other* domain.  It replaces ``stance`` only if it beats it in
  both directions (fit FactVer → report SciFact, and the reverse).

* The synthesizer's default (declared with 4 FactVer and 2 SciFact claims collected, before the
  tables): ``stance`` if its macro-F1 on annotated evidence is at least ``argmax``'s in both domains,
  else ``argmax`` (the FactVer-fitted ``rule`` is not a default candidate: it was fitted on one of the
  two domains).

**Round 4, declared before any of its numbers was computed** (committed before the archive claims were
collected): the content-free prior above removes what a model says about *nothing*; what went wrong across
domains is the lean a model has on *this domain's* evidence (REFUTED for two in three FactVer claims, SUPPORTED
on SciFact).  That lean can be measured without labels on claims the archive already holds:

* **Archive prior** (label-free, per domain and prompt): the mean label probabilities over ``M = 30``
  already-checked claims of the same domain, chosen without looking at their labels (FactVer: the tuning
  half in a seeded random order; SciFact: the first 30 train claims in file order; each with its annotated
  evidence) — for the whole-evidence prompt (mean softmax of ``joint``) and for the stance prompt (mean
  softmax over all their passages).  Their gold labels are never read by these decisions.
* ``argmax-archive``: arg-max of ``softmax(joint - log prior_joint)`` (Zhao et al.'s form with the archive
  prior).  ``stance-archive``: each passage ``softmax(logp - log prior_stance)`` over all three labels, its
  stance the arg-max, the claim's label by ``strongest_stance``.
* Reported, never chosen: ``argmax-batch`` / ``stance-batch``, the same with the prior estimated on the
  benchmark's own (balanced) claims — label-free too, but it assumes a batch as balanced as the benchmark.
* Retrieved evidence (added before any retrieved-evidence number of round 4 was seen): each evidence source
  divides out its own archive lean — the archive claims retrieved as ``carag calibrate-verdicts`` retrieves
  them (among the corpus claims; time allowed 15 per domain, whole-evidence prompt only); with the annotated
  archive's lean instead, reported as ``argmax-archive-annotated``.
* One fitted decision, leave-one-domain-out: ``lodo-logistic`` — multinomial logistic regression
  (scikit-learn, ``C=1``, balanced class weights, standardised features) on eight features: the three
  archive-calibrated joint log-probabilities, the largest archive-calibrated SUPPORTED and REFUTED stance
  probability over the passages, the mean NOT_ENOUGH_INFO one, and the share of passages whose stance is
  SUPPORTED and REFUTED; fitted on the *other* domain's report and archive claims (its labels), applied to
  this one.  Kept only if its macro-F1 beats the best label-free decision's in both directions.
* The synthesizer's default after round 4: among the label-free decisions ``argmax``, ``stance``,
  ``argmax-archive`` and ``stance-archive``, the one with the highest *smaller* of the two domains'
  macro-F1 on annotated evidence (ties: the one with fewer LLM calls); an archive decision falls back to
  ``argmax`` when no archive prior was fitted.

Metrics per (domain, evidence, decision): accuracy, macro-F1, recall and share of each predicted
label (T/F/N), per-passage stance accuracy where gold stances exist (SciFact: the rationale's
label for a cited abstract with a rationale, NOT_ENOUGH_INFO without), and seconds per claim of
the LLM calls the decision needs (measured while collecting, under whatever load there was).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llama_index_carag.verdicts import VerdictLabel
from llama_index_carag.verdicts.decision import strongest_stance
from llama_index_carag.verdicts.labels.domain_prior import mean_probabilities
from llama_index_carag.verdicts.labels.stance import (
    SIDES,
    STANCE_ORDER,
    PassageStance,
    calibrated,
    label_probabilities,
)
from research.verdict_cache import collect_domains, read_cache
from research.verdict_metrics import LABELS, accuracy, macro_f1

logger = logging.getLogger(__name__)

__all__ = [
    "prior_of",
    "decide_rows",
    "summarize",
    "DECISION_NAMES",
    "DEFAULT_CANDIDATES",
    "MARGIN_GRID",
    "fit_margin",
    "DomainPrior",
    "domain_prior",
    "decision_features",
    "fit_lodo_logistic",
    "choose_default",
]

DECISION_NAMES = (
    "argmax",
    "rule",
    "stance",
    "stance-raw",
    "stance-full",
    "stance-claim",
    "stance-margin",
    "argmax-archive",
    "stance-archive",
    "argmax-batch",
    "stance-batch",
    "lodo-logistic",
    "argmax-archive-annotated",
)
#: Label-free decisions the default is chosen from (round 4 rule, module docstring), cheapest first.
DEFAULT_CANDIDATES = ("argmax", "argmax-archive", "stance", "stance-archive")
MARGIN_GRID = tuple(np.round(np.arange(0.0, 0.501, 0.05), 2))
_T = {VerdictLabel.SUPPORTED: "T", VerdictLabel.REFUTED: "F", VerdictLabel.NOT_ENOUGH_INFO: "N"}


def _labels(d: Mapping[str, float]) -> dict[VerdictLabel, float]:
    return {VerdictLabel(k): float(v) for k, v in d.items()}


def prior_of(rows: Sequence[Mapping[str, Any]], model: str) -> dict[VerdictLabel, float]:
    """The mean label probabilities of the model's content-free inputs (its ``"prior"`` cache line)."""
    for r in rows:
        if r["kind"] == "prior" and r["model"] == model:
            probs = [label_probabilities(_labels(i["logprobs"])) for i in r["inputs"]]
            return {k: float(np.mean([p[k] for p in probs])) for k in STANCE_ORDER}
    raise ValueError(f"The cache has no content-free prior for {model!r}.")


def _stances(
    row: Mapping[str, Any], prior: Any, labels: Sequence[VerdictLabel], margin: float = 0.0
) -> list[PassageStance]:
    out = []
    for i, (lp, node_id) in enumerate(zip(row["passages"], row["passage_ids"]), start=1):
        probs = calibrated(_labels(lp), prior, labels)
        stance = max(STANCE_ORDER, key=lambda k: probs[k])
        if stance in SIDES and probs[stance] - probs[VerdictLabel.NOT_ENOUGH_INFO] < margin:
            stance = VerdictLabel.NOT_ENOUGH_INFO
        out.append(PassageStance(i, str(node_id), stance, probs[stance], probs, _labels(lp)))
    return out


def _stance_decider(labels: Sequence[VerdictLabel], prior_kind: str, margin: float = 0.0) -> Callable:
    def decide(row: Mapping[str, Any], prior: Any) -> tuple[str, list[str]]:
        p = (
            None
            if prior_kind == "none"
            else (label_probabilities(_labels(row["claim_only"])) if prior_kind == "claim" else prior)
        )
        stances = _stances(row, p, labels, margin)
        return _T[strongest_stance(stances).label], [_T[s.stance] for s in stances]

    return decide


def _argmax(row: Mapping[str, Any], prior: Any) -> tuple[str, None]:
    joint = _labels(row["joint"])
    return _T[max(STANCE_ORDER, key=lambda k: joint[k])], None


def _rule_decider(model: str) -> Callable | None:
    from llama_index_carag.verdicts.labels.rules import measured_rule

    rule = measured_rule(model)
    if rule is None:
        return None
    return lambda row, prior: (_T[rule.predict(_labels(row["joint"]), row["cosines"])], None)


def _deciders(model: str, margin: float | None) -> dict[str, Callable]:
    out: dict[str, Callable] = {"argmax": _argmax}
    rule = _rule_decider(model)
    if rule is not None:
        out["rule"] = rule
    out.update(
        {
            "stance": _stance_decider(SIDES, "model"),
            "stance-raw": _stance_decider(SIDES, "none"),
            "stance-full": _stance_decider(STANCE_ORDER, "model"),
            "stance-claim": _stance_decider(SIDES, "claim"),
        }
    )
    if margin is not None:
        out["stance-margin"] = _stance_decider(SIDES, "model", margin)
    return out


# ------------------------------------------------------------------ round 4: archive priors
@dataclass(frozen=True)
class DomainPrior:
    """A domain's label lean, estimated without labels: mean probabilities of each prompt over claims."""

    joint: dict[VerdictLabel, float]
    stance: dict[VerdictLabel, float]
    claims: int


def domain_prior(rows: Sequence[Mapping[str, Any]]) -> DomainPrior | None:
    """The mean whole-evidence and stance label probabilities over ``rows`` (their labels unread); ``None`` if empty."""
    joints = [_labels(r["joint"]) for r in rows if r.get("joint")]
    passages = [_labels(lp) for r in rows for lp in r.get("passages") or []]
    if not joints:
        return None
    uniform = {k: 1.0 / len(STANCE_ORDER) for k in STANCE_ORDER}  # joint-only rows: a whole-evidence lean only
    return DomainPrior(mean_probabilities(joints), mean_probabilities(passages) if passages else uniform, len(rows))


def _archive_priors(archive: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], DomainPrior]:
    """``{(domain, evidence): DomainPrior}`` of the archive rows (retrieved evidence has its own lean)."""
    out = {}
    for key in {(r["domain"], r["evidence"]) for r in archive}:
        prior = domain_prior([r for r in archive if (r["domain"], r["evidence"]) == key])
        if prior is not None:
            out[key] = prior
    return out


def _archive_argmax(domain: DomainPrior) -> Callable:
    def decide(row: Mapping[str, Any], prior: Any) -> tuple[str, None]:
        probs = calibrated(_labels(row["joint"]), domain.joint, STANCE_ORDER)
        return _T[max(STANCE_ORDER, key=lambda k: probs[k])], None

    return decide


def _archive_stance(domain: DomainPrior) -> Callable:
    def decide(row: Mapping[str, Any], prior: Any) -> tuple[str, list[str]]:
        stances = _stances(row, domain.stance, STANCE_ORDER)
        return _T[strongest_stance(stances).label], [_T[s.stance] for s in stances]

    return decide


_FEATURES = 8


def decision_features(row: Mapping[str, Any], domain: DomainPrior) -> np.ndarray:
    """The eight ``lodo-logistic`` features of one claim row, shape ``(8,)`` (module docstring)."""
    joint = calibrated(_labels(row["joint"]), domain.joint, STANCE_ORDER)
    stances = _stances(row, domain.stance, STANCE_ORDER) if row.get("passages") else []
    s = [st.probabilities[VerdictLabel.SUPPORTED] for st in stances] or [0.0]
    f = [st.probabilities[VerdictLabel.REFUTED] for st in stances] or [0.0]
    n = [st.probabilities[VerdictLabel.NOT_ENOUGH_INFO] for st in stances] or [1.0]
    sides = [st.stance for st in stances]
    share = (lambda lab: sides.count(lab) / len(sides)) if sides else (lambda lab: 0.0)
    return np.array(
        [np.log(max(joint[k], 1e-12)) for k in STANCE_ORDER]
        + [max(s), max(f), float(np.mean(n)), share(VerdictLabel.SUPPORTED), share(VerdictLabel.REFUTED)]
    )


def fit_lodo_logistic(rows: Sequence[Mapping[str, Any]], priors: Mapping[str, DomainPrior]) -> Any:
    """The ``lodo-logistic`` pipeline fitted on ``rows`` (labelled; each row calibrated by its domain's prior)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    usable = [r for r in rows if r.get("joint") and r["domain"] in priors]
    x = np.stack([decision_features(r, priors[r["domain"]]) for r in usable])
    y = [r["gold"] for r in usable]
    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, class_weight="balanced", max_iter=1000))
    return model.fit(x, y)


def _lodo_decider(model: Any, domain: DomainPrior) -> Callable:
    def decide(row: Mapping[str, Any], prior: Any) -> tuple[str, None]:
        return str(model.predict(decision_features(row, domain)[None, :])[0]), None

    return decide


def choose_default(summary: Sequence[Mapping[str, Any]]) -> str:
    """The round-4 default: the label-free candidate with the highest smaller-domain macro-F1 (annotated)."""
    worst: dict[str, float] = {}
    for name in DEFAULT_CANDIDATES:
        scores = [r["macro_F1"] for r in summary if r["decision"] == name and r["evidence"] == "annotated"]
        if len(scores) >= 2:
            worst[name] = min(scores)
    if not worst:
        return "argmax"
    return max(worst, key=lambda n: (worst[n], -DEFAULT_CANDIDATES.index(n)))


def decide_rows(rows: Sequence[Mapping[str, Any]], prior: Any, decide: Callable) -> list[dict[str, Any]]:
    """``[{"gold", "pred", "stances", "passage_gold"}]`` for claim rows under one decision (T/F/N)."""
    out = []
    for r in rows:
        if not r["passage_ids"]:  # no evidence at all
            pred, stances = "N", []
        else:
            pred, stances = decide(r, prior)
        out.append({"gold": r["gold"], "pred": pred, "stances": stances, "passage_gold": r.get("passage_gold")})
    return out


def _metrics(decided: Sequence[Mapping[str, Any]], seconds: float) -> dict[str, Any]:
    gold, pred = [d["gold"] for d in decided], [d["pred"] for d in decided]
    share = Counter(pred)
    out: dict[str, Any] = {"claims": len(gold), "accuracy": accuracy(gold, pred), "macro_F1": macro_f1(gold, pred)}
    for c in LABELS:
        hits = [p == c for g, p in zip(gold, pred) if g == c]
        out[f"recall_{c}"] = float(np.mean(hits)) if hits else float("nan")
    for c in LABELS:
        out[f"share_{c}"] = share[c] / len(pred) if pred else float("nan")
    pairs = [
        (g, s)
        for d in decided
        if d["stances"] and d["passage_gold"]
        for g, s in zip(d["passage_gold"], d["stances"])
        if g is not None
    ]
    out["stance_accuracy"] = float(np.mean([g == s for g, s in pairs])) if pairs else float("nan")
    out["passages_with_gold"] = len(pairs)
    out["s_per_claim"] = seconds
    return {k: (round(float(v), 4) if isinstance(v, (float, np.floating)) else v) for k, v in out.items()}


def _seconds(rows: Sequence[Mapping[str, Any]], name: str) -> float:
    """Mean seconds per claim of the LLM calls ``name`` needs (reused whole-evidence scores have no time)."""
    keys = {
        "argmax": ("seconds_joint",),
        "rule": ("seconds_joint",),
        "lodo-logistic": ("seconds_joint", "seconds_passages"),
    }
    wanted = keys.get(name, ("seconds_joint",) if name.startswith("argmax") else ("seconds_passages",))
    values = [sum(r[k] for k in wanted) for r in rows if all(r.get(k) is not None for k in wanted)]
    return float(np.mean(values)) if values else float("nan")


def fit_margin(rows: Sequence[Mapping[str, Any]], prior: Any) -> float:
    """The margin of ``stance-margin`` with the best macro-F1 on ``rows`` (ties: the smaller margin)."""
    best = max(MARGIN_GRID, key=lambda m: (macro_f1(*_gold_pred(rows, prior, m)), -m))
    return float(best)


def _gold_pred(rows: Sequence[Mapping[str, Any]], prior: Any, margin: float) -> tuple[list[str], list[str]]:
    decided = decide_rows(rows, prior, _stance_decider(SIDES, "model", margin))
    return [d["gold"] for d in decided], [d["pred"] for d in decided]


def summarize(cache: Sequence[Mapping[str, Any]], model: str) -> list[dict[str, Any]]:
    """One row per (domain, evidence, decision) of ``model``'s cached claims (see the module docstring).

    Archive rows (``split == "archive"``) are never reported: they give their domain's label-free prior
    (and, with their labels, training rows for the *other* domain's ``lodo-logistic``).
    """
    prior = prior_of(cache, model)
    latest = {
        (r["domain"], r["evidence"], r["claim_id"], r.get("split", "report")): r
        for r in cache
        if r["kind"] == "claim" and r["model"] == model
    }
    claims = [r for r in latest.values() if r.get("split", "report") == "report"]  # merged caches: once each
    archive = [r for r in latest.values() if r.get("split") == "archive"]
    priors = _archive_priors(archive)
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in claims:
        groups.setdefault((r["domain"], r["evidence"]), []).append(r)
    out = []
    for (domain, evidence), rows in groups.items():
        other = [r for r in claims if r["domain"] != domain and r["evidence"] == "annotated"]
        margin = fit_margin(other, prior) if other else None
        deciders = _deciders(model, margin)
        mine = priors.get((domain, evidence)) or priors.get((domain, "annotated"))
        if mine is not None:
            deciders["argmax-archive"] = _archive_argmax(mine)
            deciders["stance-archive"] = _archive_stance(mine)
            if evidence != "annotated" and (domain, evidence) in priors and (domain, "annotated") in priors:
                deciders["argmax-archive-annotated"] = _archive_argmax(priors[(domain, "annotated")])
            fit_rows = other + [r for r in archive if r["domain"] != domain and r["evidence"] == "annotated"]
            annotated = {d: p for (d, e), p in priors.items() if e == "annotated"}
            if fit_rows and all(r["domain"] in annotated for r in fit_rows):
                deciders["lodo-logistic"] = _lodo_decider(fit_lodo_logistic(fit_rows, annotated), mine)
        batch = domain_prior(rows)
        if batch is not None:
            deciders["argmax-batch"] = _archive_argmax(batch)
            deciders["stance-batch"] = _archive_stance(batch)
        if any(r.get("passages") is None for r in rows):  # joint-only rows: no stance decision to replay
            deciders = {n: d for n, d in deciders.items() if n == "rule" or n.startswith("argmax")}
        for name, decide in deciders.items():
            row = {
                "domain": domain,
                "evidence": evidence,
                "decision": name,
                **_metrics(decide_rows(rows, prior, decide), _seconds(rows, name)),
            }
            if name == "stance-margin":
                row["fitted_margin"] = margin
            out.append(row)
    return out


# ------------------------------------------------------------------ the command
_COLUMNS = [
    "domain",
    "evidence",
    "decision",
    "claims",
    "accuracy",
    "macro_F1",
    "recall_T",
    "recall_F",
    "recall_N",
    "share_T",
    "share_F",
    "share_N",
    "stance_accuracy",
    "passages_with_gold",
    "s_per_claim",
]


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The summary rows as a markdown table (NaN as ``-``)."""

    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and np.isnan(v)):
            return "-"
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in _COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def run_two_domain_bench(
    factver: str,
    scifact: str,
    cache: str,
    *,
    llm: str = "qwen1.5b",
    per_label: int = 10,
    retrieved: bool = False,
    cache_dir: str | None = None,
    collect_first: bool = True,
) -> dict[str, Any]:
    """Collect (what the cache lacks) and summarise both domains; returns ``{"summary", "markdown", "cache"}``.

    ``cache``: one JSONL file, or (``collect_first=False``) several, comma-separated, merged.
    """
    if collect_first:
        collect_domains(
            cache, llm, factver=factver, scifact=scifact, per_label=per_label, retrieved=retrieved, cache_dir=cache_dir
        )
    rows = [r for path in str(cache).split(",") for r in read_cache(path)]  # several caches: merged
    models = list(dict.fromkeys(r["model"] for r in rows if r["kind"] == "prior"))
    if len(models) != 1:
        raise ValueError(f"{cache} holds the outputs of {len(models)} LLMs ({models}); use one cache per LLM.")
    model = models[0]
    summary = summarize(rows, model)
    default = choose_default(summary)
    note = f"\nDefault by the declared rule (highest smaller-domain macro-F1, annotated): **{default}**\n"
    return {
        "summary": summary,
        "markdown": markdown(summary) + note,
        "cache": str(cache),
        "model": model,
        "default": default,
    }
