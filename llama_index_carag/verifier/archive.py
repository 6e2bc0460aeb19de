"""The verifier adapted to an archive: a desk's own labelled claims, used to fit what they can afford.

:func:`fit_archive_verifier` (``carag index --calibrate``) compares, out of fold, what an archive's labelled claims
can buy over the verifier the index would get without them, and keeps a change only where it wins.  The rule,
fixed on the tuning data before any report figure was looked at:

1. Examples: each labelled claim with the passages the retriever gives it (what a new claim will get; not its
   linked evidence).  A head needs at least :data:`MIN_HEAD` claims; a fine-tune at least :data:`MIN_FINE_TUNE`
   with at least :data:`MIN_PER_LABEL` of each label.  Below :data:`MIN_HEAD` the out-of-the-box verifier stays.
2. Candidates, from the cheapest: **shipped** (the out-of-the-box verifier, what ``carag index`` gives without
   ``--calibrate``: the shipped weights with the domain check's thresholds,
   :mod:`~llama_index_carag.verifier.domain`, fitted on the corpus's claims without their labels, and the pool's
   confidence map; nothing fitted to the labels); **head** (a :class:`~llama_index_carag.verifier.head.LabelHead`
   on the shipped verifier's probabilities, out of fold over :data:`HEAD_FOLDS` stratified folds); **fine-tune**
   (two folds, stratified by label, seed 0: the shipped verifier fine-tuned on one fold reads the other; each
   retrieved passage is a pair with its claim's label, the labels balanced by resampling, :data:`FINE_TUNE`; a
   claim's label is the arg-max of its passages' *mean* probabilities).  Each is scored by claim-level macro-F1
   (out of fold; the shipped candidate as deployed), with the abstention of
   :meth:`~llama_index_carag.verifier.model.ClaimVerifier.decide` applied through its confidence map (fitted out of
   fold; the shipped candidate's is the pool's).
3. Kept: going from the cheapest, a candidate replaces the one kept so far when it beats it by at least
   :data:`MARGIN` **and** the gain holds over the claims: in at least :data:`LEVEL` of a paired bootstrap's
   :data:`RESAMPLES` resamples of the archive's claims its macro-F1 is above the kept one's (:func:`gain_share`).
   Measured on held-out tuning claims (heads only), this rule with this fallback was at least as good as the
   margin alone against an archive-fitted shipped verifier at every size (docs/VERDICTS.md).
   A fine-tune must also pass the **linked-evidence check**: where the archive links evidence to its claims (at
   least :data:`MIN_LINKED` passages of SUPPORTED and of REFUTED claims), the fold fine-tunes must separate support
   from refutation on the held fold's linked passages no worse than the shipped verifier, by at most
   :data:`LINKED_TOLERANCE` (pair-level AUC of P(S) − P(R), each passage with its claim's label).  The claim-level
   score reads retrieved passages, mostly topical; trained on many of them a fine-tune can learn a topic's label
   instead of a passage's stance, which that score cannot see and the linked passages show.  A kept fine-tune is
   trained once more on every claim; a kept head is fitted on every claim.
   A kept head's or fine-tune's confidence map (:class:`~llama_index_carag.verifier.confidence.LabelConfidence`)
   is fitted on its out-of-fold labels, so its confidence is the archive's rate of being right; a kept shipped
   candidate is saved as it is.
   The verifier is saved with the index (``<index>/verifier``) with the record of the comparison (the shipped
   weights are referenced, not copied, unless fine-tuned).

A passage longer than the verifier's chunk is one pair: for a SUPPORTED or REFUTED claim its chunk most likely of
the claim's label, for a NOT_ENOUGH_INFO claim its most decisive chunk (the one the verifier will read at
inference), both by the shipped verifier.
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.verdicts.types import LABELS, VerdictLabel
from llama_index_carag.verifier.confidence import confidence_of
from llama_index_carag.verifier.domain import domain_verifier, reference_sample
from llama_index_carag.verifier.head import LabelHead
from llama_index_carag.verifier.model import (
    VERIFIER_DIR,
    ClaimVerifier,
    VerifierLabel,
    decide_label,
    decisive_chunk,
    remove_verifier_folder,
)
from llama_index_carag.verifier.pairs import Pair
from llama_index_carag.verifier.training import TrainingConfig, claim_figures, train_pairs

logger = logging.getLogger(__name__)

MIN_HEAD, MIN_FINE_TUNE, MIN_PER_LABEL = 12, 24, 4
#: The out-of-fold macro-F1 a costlier candidate must gain over the one kept so far.
MARGIN = 0.02
#: Bootstrap resamples of the archive's claims, and the share of them a candidate's gain must hold in.
RESAMPLES, LEVEL = 2000, 0.95
#: How far below the shipped verifier a fine-tune may separate the linked passages.
LINKED_TOLERANCE = 0.02
#: Linked passages of SUPPORTED and of REFUTED claims the linked-evidence check needs (each), else it is skipped.
MIN_LINKED = 10
FOLDS = 2
#: Folds of a head's out-of-fold score.
HEAD_FOLDS = 5
#: The candidates, from the cheapest (module docstring).
CANDIDATES = ("shipped", "head", "fine-tune")
#: The fine-tune's recipe (on top of the shipped verifier).
FINE_TUNE = TrainingConfig(epochs=2.0, learning_rate=3e-5, max_length=160, eval_every=10**9, patience=1)


@dataclass(frozen=True)
class ArchiveClaim:
    """One labelled claim of the archive with the passages the retriever gives it (``passages``) and the passages
    the archive links to it (``linked``; may be empty)."""

    claim_id: str
    claim: str
    label: str
    passages: tuple[str, ...]
    linked: tuple[str, ...] = ()


def labelled_claims(claim_nodes: Sequence[Any], label_key: str = "label") -> list[tuple[Any, VerdictLabel]]:
    """The claims whose ``metadata[label_key]`` is a verdict label (T/F/N or a full name), with that label."""
    out = []
    for node in claim_nodes:
        raw = (node.metadata or {}).get(label_key)
        if raw in (None, ""):
            continue
        try:
            out.append((node, VerdictLabel.from_fever(str(raw))))
        except ValueError:
            logger.debug("claim %s: label %r is not a verdict label", node.node_id, raw)
    return out


def archive_claims(
    claim_nodes: Sequence[Any],
    passages_of: Callable[[str], Sequence[str]],
    linked: Mapping[str, Sequence[str]] | None = None,
) -> list[ArchiveClaim]:
    """The labelled claims of an index (``metadata["label"]``: T/F/N or a full name), each with the passages
    ``passages_of(claim text)`` gives it (the index's retriever) and its linked passages ``linked[node id]``;
    claims without a retrieved passage are left out."""
    out = []
    for node, label in labelled_claims(claim_nodes):
        passages = tuple(str(t) for t in passages_of(node.get_content()))
        if passages:
            own = tuple(str(t) for t in (linked or {}).get(node.node_id, ()))
            out.append(ArchiveClaim(node.node_id, node.get_content(), label.value, passages, own))
    return out


def linked_passages(retriever: Any, claim_nodes: Sequence[Any]) -> dict[str, tuple[str, ...]]:
    """``{claim node id: texts of its linked evidence}`` in ``retriever``'s index (the links of
    :func:`~llama_index_carag.retrieval.calibration.claim_links`); empty for a retriever without an index."""
    from llama_index_carag.retrieval.calibration import claim_links

    index, corpus = getattr(retriever, "index", None), getattr(retriever, "corpus", None)
    if index is None or corpus is None:
        return {}
    links = claim_links(index, corpus, claim_nodes)
    ids = sorted({i for found in links.values() for i in found})
    text = {n.node_id: n.get_content() for n in index.docstore.get_nodes(ids, raise_error=False) if n is not None}
    return {cid: tuple(text[i] for i in found if i in text) for cid, found in links.items()}


def _folds(labels: Sequence[str], n_folds: int, seed: int = 0) -> np.ndarray:
    """Each claim's fold, stratified by label."""
    rng = np.random.default_rng(seed)
    fold = np.zeros(len(labels), dtype=int)
    for label in LABELS:
        idx = [i for i, k in enumerate(labels) if k == label]
        for j, i in enumerate(rng.permutation(idx)):
            fold[int(i)] = j % n_folds
    return fold


@dataclass(frozen=True)
class _Reading:
    """The shipped verifier's reading of the archive: per claim its passages' probabilities (decisive chunk) and
    per passage the chunk a fine-tune trains on (module docstring)."""

    probabilities: list[np.ndarray]
    chunks: list[list[str]]


def _read(base: ClaimVerifier, claims: Sequence[ArchiveClaim]) -> _Reading:
    """One batched pass of ``base`` over every chunk of every claim's passages."""
    readings, chosen = [], []
    for c, passages in zip(claims, base.chunk_probabilities([(c.claim, c.passages) for c in claims])):
        rows, picks = [], []
        for chunks, block in passages:
            decisive = decisive_chunk(block)
            rows.append(block[decisive])
            own = decisive if c.label == "NOT_ENOUGH_INFO" else int(block[:, LABELS.index(c.label)].argmax())
            picks.append(chunks[own])
        readings.append(np.vstack(rows))
        chosen.append(picks)
    return _Reading(readings, chosen)


def _balanced_pairs(claims: Sequence[ArchiveClaim], chunks: Sequence[Sequence[str]], seed: int = 0) -> list[Pair]:
    """Each passage's chunk with its claim's label; each label resampled to a third of the pairs (seeded)."""
    by_label: dict[str, list[Pair]] = {k: [] for k in LABELS}
    for c, picks in zip(claims, chunks):
        by_label[c.label].extend(Pair(c.claim_id, c.claim, t, c.label, "archive") for t in picks)
    total = sum(len(v) for v in by_label.values())
    rng = random.Random(seed)
    out: list[Pair] = []
    for label in LABELS:
        have, want = by_label[label], round(total / len(LABELS))
        if have:
            out += rng.sample(have, want) if want <= len(have) else have + rng.choices(have, k=want - len(have))
    return out


def _fine_tuned(base: ClaimVerifier, pairs: Sequence[Pair], work: Path, config: TrainingConfig) -> ClaimVerifier:
    import torch
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(
        str(base.weights_dir),
        device="cpu",
        max_length=config.max_length,
        local_files_only=True,
        model_kwargs={"dtype": torch.float32},
    )
    train_pairs(model, pairs, [], work, config, show_progress=True)
    tuned = ClaimVerifier(base.path, cross_encoder=model)
    tuned.rule, tuned.head, tuned.confidence = "mean", None, None
    return tuned


def _abstained(decided: Sequence[VerifierLabel], gold: Sequence[str]) -> list[str]:
    """A candidate's out-of-fold labels after the abstention, with a confidence map fitted out of fold (two folds,
    seed 1)."""
    labels = [d.label for d in decided]
    folds = _folds(gold, FOLDS, seed=1)
    final: list[str] = list(labels)
    from llama_index_carag.verifier.model import MIN_CONFIDENCE

    for f in range(FOLDS):
        train = [i for i in range(len(gold)) if folds[i] != f]
        conf = confidence_of([decided[i] for i in train], [gold[i] for i in train])
        for i in np.flatnonzero(folds == f).tolist():
            d = decided[i]
            if d.label != "NOT_ENOUGH_INFO" and conf.predict(d.label, d.score) < MIN_CONFIDENCE:
                final[i] = "NOT_ENOUGH_INFO"
    return final


def gain_share(
    gold: Sequence[str], challenger: Sequence[str], kept: Sequence[str], resamples: int = RESAMPLES, seed: int = 0
) -> float:
    """The share of bootstrap resamples of the claims (the same claims for both, drawn with replacement) in which
    ``challenger``'s labels have a higher macro-F1 than ``kept``'s (macro over the labels present in the resample's
    ``gold``, as :func:`~llama_index_carag.verifier.training.claim_figures` scores)."""
    if not len(gold) == len(challenger) == len(kept):
        raise ValueError(f"gold, challenger and kept differ in length: {len(gold)}, {len(challenger)}, {len(kept)}.")
    if not gold:
        return 0.0
    index = {k: j for j, k in enumerate(LABELS)}
    g, a, b = (np.array([index[x] for x in xs]) for xs in (gold, challenger, kept))
    draws = np.random.default_rng(seed).integers(0, len(g), size=(resamples, len(g)))
    gd = g[draws]
    return float(np.mean(_macro_f1(gd, a[draws]) > _macro_f1(gd, b[draws])))


def _macro_f1(gold: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Row-wise macro-F1 of label-index matrices (over the labels present in each row of ``gold``)."""
    total = np.zeros(len(gold))
    present = np.zeros(len(gold))
    for k in range(len(LABELS)):
        is_gold, is_pred = gold == k, pred == k
        tp = (is_gold & is_pred).sum(axis=1)
        wrong = (is_gold ^ is_pred).sum(axis=1)
        total += np.where(tp > 0, 2 * tp / np.maximum(2 * tp + wrong, 1), 0.0)
        present += is_gold.any(axis=1)
    return total / np.maximum(present, 1)


def separation(rows: Sequence[np.ndarray], labels: Sequence[str]) -> float | None:
    """Pair-level AUC of P(S) − P(R) between the passages of SUPPORTED and of REFUTED claims (``rows``: one
    probability row per passage, ``labels``: its claim's label); ``None`` under :data:`MIN_LINKED` of either."""
    from sklearn.metrics import roc_auc_score

    keep = [i for i, k in enumerate(labels) if k in ("SUPPORTED", "REFUTED")]
    supported = [labels[i] == "SUPPORTED" for i in keep]
    if min(sum(supported), len(supported) - sum(supported)) < MIN_LINKED:
        return None
    return float(roc_auc_score(supported, [float(rows[i][0] - rows[i][1]) for i in keep]))


def fit_archive_verifier(
    claims: Sequence[ArchiveClaim],
    out_dir: str | Path,
    *,
    base: ClaimVerifier | None = None,
    out_of_box: ClaimVerifier | None = None,
    config: TrainingConfig = FINE_TUNE,
) -> dict[str, Any]:
    """Fit what the archive can afford (module docstring) and save it to ``out_dir``.

    ``out_of_box`` is the verifier the index gets without the labels (the domain check on the corpus's claims,
    :func:`~llama_index_carag.verifier.domain.domain_verifier`); without it, the domain check on the archive's
    own claims, their labels unread.

    Returns the record: the choice (one of :data:`CANDIDATES`), each candidate's out-of-fold figures, the claim
    counts and the seconds it took.
    """
    from llama_index_carag.verifier.model import shipped_verifier

    started = time.perf_counter()
    base = base or shipped_verifier()
    claims = [c for c in claims if c.passages and c.label in LABELS]
    gold = [c.label for c in claims]
    counts = {k: gold.count(k) for k in LABELS}
    record: dict[str, Any] = {
        "claims": len(claims),
        "labels": counts,
        "margin": MARGIN,
        "bootstrap": {"resamples": RESAMPLES, "level": LEVEL},
        "folds": FOLDS,
    }
    if len(claims) < MIN_HEAD:
        record.update(choice="shipped", why=f"fewer than {MIN_HEAD} labelled claims with evidence")
        return _finish(record, out_of_box, out_dir, started)
    reading = _read(base, claims)
    if out_of_box is None:
        out_of_box = domain_verifier(base, [reading.probabilities[i] for i in reference_sample(len(claims))])
    candidates = {"shipped": [out_of_box.decide(p) for p in reading.probabilities]}
    found: dict[str, dict[str, Any]] = {}
    enough = min(counts.values()) >= MIN_PER_LABEL
    if enough:
        candidates["head"] = _head_out_of_fold(base, reading.probabilities, gold)
    else:
        found["head"] = {"skipped": f"needs {MIN_PER_LABEL} claims of each label"}
    if enough and len(claims) >= MIN_FINE_TUNE:
        candidates["fine-tune"], linked_rows = _fine_tuned_out_of_fold(base, claims, reading, config)
        found["fine-tune"] = {"linked": _linked_check(base, claims, linked_rows)}
    else:
        found["fine-tune"] = {"skipped": f"needs {MIN_FINE_TUNE} claims with {MIN_PER_LABEL} of each label"}
    final = {name: _abstained(decided, gold) for name, decided in candidates.items() if name != "shipped"}
    final["shipped"] = [d.label for d in candidates["shipped"]]  # as deployed: its own confidence map abstained
    for name in final:
        found[name] = {**claim_figures(gold, final[name]), **found.get(name, {})}
    record["candidates"] = {name: found[name] for name in CANDIDATES}
    best = record["choice"] = _choice(found, final, gold)
    if best == "shipped":  # the out-of-the-box verifier as it is, its confidence the pool's
        return _finish(record, out_of_box, out_dir, started)
    confidence = confidence_of(candidates[best], gold)
    if best == "head":
        verifier = ClaimVerifier(base.path)
        verifier.head = LabelHead().fit(reading.probabilities, gold)
    else:
        with tempfile.TemporaryDirectory(prefix="carag-archive-") as tmp:
            pairs = _balanced_pairs(claims, reading.chunks)
            verifier = _fine_tuned(base, pairs, Path(tmp) / "all", config)
            verifier.confidence = confidence
            return _finish(record, verifier, out_dir, started)
    verifier.confidence = confidence
    return _finish(record, verifier, out_dir, started)


def _choice(found: Mapping[str, dict[str, Any]], final: Mapping[str, Sequence[str]], gold: Sequence[str]) -> str:
    """Step 3 of the module docstring; each candidate compared is given its ``against`` record (the candidate it
    was compared with, its gain and the bootstrap's :func:`gain_share`)."""
    best = "shipped"
    for name in CANDIDATES[1:]:
        if name not in final or found[name].get("linked", {}).get("passed") is False:
            continue
        gain = found[name]["macro_f1"] - found[best]["macro_f1"]
        share = gain_share(gold, final[name], final[best])
        found[name]["against"] = {"kept": best, "gain": round(gain, 4), "gain_share": round(share, 4)}
        if gain >= MARGIN and share >= LEVEL:
            best = name
    return best


def _head_out_of_fold(base: ClaimVerifier, probs: Sequence[np.ndarray], gold: Sequence[str]) -> list[VerifierLabel]:
    """Every claim read by a :class:`LabelHead` fitted on the other folds (:data:`HEAD_FOLDS`, stratified)."""
    decided: list[Any] = [None] * len(gold)
    folds = _folds(gold, HEAD_FOLDS)
    for f in range(HEAD_FOLDS):
        train = np.flatnonzero(folds != f).tolist()
        head = LabelHead().fit([probs[i] for i in train], [gold[i] for i in train])
        for i in np.flatnonzero(folds == f).tolist():
            decided[i] = decide_label(probs[i], base.threshold, head)
    return decided


def _fine_tuned_out_of_fold(
    base: ClaimVerifier, claims: Sequence[ArchiveClaim], reading: _Reading, config: TrainingConfig
) -> tuple[list[VerifierLabel], list[np.ndarray]]:
    """Every claim read (the mean rule) by the verifier fine-tuned on the other fold (:data:`FOLDS`), and each
    claim's linked passages read by that verifier (one row per passage)."""
    folds = _folds([c.label for c in claims], FOLDS)
    decided: list[Any] = [None] * len(claims)
    linked: list[np.ndarray] = [np.zeros((0, len(LABELS)))] * len(claims)
    with tempfile.TemporaryDirectory(prefix="carag-archive-") as tmp:
        for f in range(FOLDS):
            train = np.flatnonzero(folds != f).tolist()
            pairs = _balanced_pairs([claims[i] for i in train], [reading.chunks[i] for i in train])
            tuned = _fine_tuned(base, pairs, Path(tmp) / f"fold{f}", config)
            held = np.flatnonzero(folds == f).tolist()
            probs = tuned.batch_probabilities([(claims[i].claim, list(claims[i].passages)) for i in held])
            for i, p in zip(held, probs):
                decided[i] = decide_label(p, tuned.threshold, rule="mean")
            with_links = [i for i in held if claims[i].linked]
            rows = tuned.batch_probabilities([(claims[i].claim, list(claims[i].linked)) for i in with_links])
            for i, r in zip(with_links, rows):
                linked[i] = r
            logger.info("archive fold %d/%d fine-tuned on %d claims", f + 1, FOLDS, len(train))
    return decided, linked


def _linked_check(base: ClaimVerifier, claims: Sequence[ArchiveClaim], tuned_rows: Sequence[np.ndarray]) -> dict:
    """The linked-evidence check of a fine-tune (module docstring): its folds' :func:`separation` of the linked
    passages against the shipped verifier's, at most :data:`LINKED_TOLERANCE` below it; ``passed`` is ``None`` when there are
    too few linked passages."""
    with_links = [i for i, c in enumerate(claims) if c.linked]
    labels = [claims[i].label for i in with_links for _ in claims[i].linked]
    shipped_rows = base.batch_probabilities([(claims[i].claim, list(claims[i].linked)) for i in with_links])
    flat = [r for rows in shipped_rows for r in rows]
    shipped = separation(flat, labels)
    tuned = separation([r for i in with_links for r in tuned_rows[i]], labels)
    out: dict[str, Any] = {"passages": len(labels), "shipped_auc": shipped, "fine_tune_auc": tuned}
    out["passed"] = None if shipped is None or tuned is None else tuned >= shipped - LINKED_TOLERANCE
    return out


def _finish(record: dict[str, Any], verifier: ClaimVerifier | None, out_dir: str | Path, started: float) -> dict:
    """Save ``verifier`` (or remove a stale one) with ``record``; the record with its cost.  Either is one commit
    (:func:`~llama_index_carag.verifier.model.write_verifier_folder`): a crash leaves the old folder or the new."""
    record["seconds"] = round(time.perf_counter() - started, 1)
    if verifier is None:
        remove_verifier_folder(out_dir)
    else:  # a fine-tuned model with its weights; else the base's weights named, not copied
        verifier.save(out_dir, name_shipped=verifier.shipped_weights, archive=record)
    return record


def fit_index_verifier(
    retriever: Any, claim_nodes: Sequence[Any], index_dir: str | Path, *, calibrate: bool = False
) -> dict[str, Any] | None:
    """The verdict half of an index, saved in ``index_dir/verifier`` where every check finds it
    (:func:`~llama_index_carag.verifier.model.index_verifier`): with ``calibrate``, fitted to the archive's labelled
    claims (:func:`fit_archive_verifier`, each claim with the passages ``retriever`` gives it; ``kind="archive"``;
    what it falls back on is the domain check on up to 200 corpus claims, or on the archive's own claims when it
    has that many), as ``ContextAwareRetriever.from_index(calibrate=True)`` fits the ranking half; without, the
    domain check on the claims' texts alone (:func:`~llama_index_carag.verifier.domain.fit_domain_verifier`;
    ``kind="domain"``).  ``carag index [--calibrate]`` is this after the retriever.  Returns the fit's record, or
    ``None`` when the corpus has too few claims for a domain check (the shipped verifier stays)."""
    from llama_index_carag.verifier.domain import MAX_CLAIMS, MIN_CLAIMS, fit_domain_verifier, out_of_box_verifier

    def passages(claim: str) -> list[str]:
        return [n.node.get_content() for n in retriever.retrieve(claim)]

    def reference() -> list[tuple[str, list[str]]]:  # the domain check's claims, each with its passages
        return [(claims[i], passages(claims[i])) for i in reference_sample(len(claims))]

    folder = Path(index_dir) / VERIFIER_DIR
    claims = [n.get_content() for n in claim_nodes]
    if calibrate:
        archive = archive_claims(claim_nodes, passages, linked_passages(retriever, claim_nodes))
        # with as many labelled claims as a domain check reads, they are its reference (in fit_archive_verifier)
        few = len(archive) < MAX_CLAIMS and len(claims) >= MIN_CLAIMS
        out_of_box = out_of_box_verifier(reference()) if few else None
        return {"kind": "archive", **fit_archive_verifier(archive, folder, out_of_box=out_of_box)}
    if len(claims) < MIN_CLAIMS:
        logger.info("domain check skipped: %d corpus claims (needs %d)", len(claims), MIN_CLAIMS)
        return None
    record = fit_domain_verifier(reference(), folder, max_claims=MAX_CLAIMS)
    return None if record is None else {"kind": "domain", **record}
