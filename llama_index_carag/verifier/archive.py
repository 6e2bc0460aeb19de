"""The verifier adapted to an archive: a desk's own labelled claims, used to fit what they can afford.

:func:`fit_archive_verifier` (``carag index --calibrate``) compares, out of fold, what an archive's labelled claims
can buy over the shipped verifier, and keeps a change only where it wins.  The rule, fixed before any figure
on a report set was looked at:

1. Examples: each labelled claim with its passages (its linked evidence).  A fine-tune needs at least
   :data:`MIN_FINE_TUNE` claims with at least :data:`MIN_PER_LABEL` of each label; a new threshold at least
   :data:`MIN_THRESHOLD` claims.  Below that the shipped verifier stays.
2. Two folds, stratified by label (seed 0).  Per fold the shipped verifier is fine-tuned on the other fold
   (:data:`FINE_TUNE`: two epochs) and scores this fold's claims: out-of-fold probabilities for every claim.
3. Candidates, from the cheapest: **shipped** (its own threshold); **threshold** (the shipped verifier, the
   threshold chosen on the archive); **head** (the shipped verifier's probabilities read by a
   :class:`~llama_index_carag.verifier.head.LabelHead` fitted on the archive; at least :data:`MIN_FINE_TUNE`
   claims with :data:`MIN_PER_LABEL` of each label); **fine-tune** (the threshold chosen on its out-of-fold
   probabilities); **fine-tune + head** (a head on the fine-tune's out-of-fold probabilities).  Each is scored by
   claim-level macro-F1 on the archive: the two thresholds are chosen on the probabilities they are scored on
   (one number each); a head is scored out of fold (five folds, stratified, seed 0), its own strength chosen
   inside each fold.
4. Kept: going from the cheapest, a candidate replaces the one kept so far when it beats it by at least
   :data:`MARGIN`.  A kept fine-tune is trained once more on every claim; a kept head is fitted on every claim's
   (out-of-fold) probabilities; the verifier is saved with the index (``<index>/verifier``) with the record of
   the comparison (a threshold or a head on the shipped weights is saved without a copy of them).

This rule (the head candidates added to the first three, and "from the cheapest") was fixed before any figure
of a head on a report set was looked at.

Fine-tuning pairs: a passage of a SUPPORTED or REFUTED claim gives its most telling chunk (the one the shipped
verifier finds most likely of the claim's label) with the claim's label; a NOT_ENOUGH_INFO claim's chunks are
all NOT_ENOUGH_INFO.
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.verdicts.types import VerdictLabel
from llama_index_carag.verifier.head import LabelHead
from llama_index_carag.verifier.model import CONFIG_NAME, ClaimVerifier, chunk_passage
from llama_index_carag.verifier.pairs import LABELS, Pair
from llama_index_carag.verifier.training import (
    TrainingConfig,
    choose_threshold,
    claim_figures,
    train_pairs,
)

logger = logging.getLogger(__name__)

__all__ = [
    "ArchiveClaim",
    "archive_claims",
    "fit_archive_verifier",
    "fine_tune_pairs",
    "index_verifier",
    "VERIFIER_DIR",
    "FINE_TUNE",
]

#: The index's sub-folder holding its archive verifier.
VERIFIER_DIR = "verifier"
MIN_FINE_TUNE, MIN_PER_LABEL, MIN_THRESHOLD = 30, 5, 12
MARGIN = 0.02
FOLDS = 2
#: Folds of a head's out-of-fold score.
HEAD_FOLDS = 5
#: The candidates, from the cheapest (module docstring).
CANDIDATES = ("shipped", "threshold", "head", "fine-tune", "fine-tune + head")
#: The fine-tune's recipe (on top of the shipped verifier).
FINE_TUNE = TrainingConfig(epochs=2.0, learning_rate=3e-5, max_length=160, eval_every=10**9, patience=1)


@dataclass(frozen=True)
class ArchiveClaim:
    """One labelled claim of the archive with the passages it was checked against."""

    claim_id: str
    claim: str
    label: str
    passages: tuple[str, ...]


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


def archive_claims(claim_nodes: Sequence[Any], evidence_nodes: Sequence[Any], k: int = 6) -> list[ArchiveClaim]:
    """The labelled claims of an index (``metadata["label"]``: T/F/N or a full name) with their linked evidence
    (``metadata["evidence_ids"]``, at most ``k`` passages, in link order); claims without either are left out."""
    from llama_index_carag.datasets import LINKS_KEY

    texts = {n.node_id: n.get_content() for n in evidence_nodes}
    out = []
    for node, label in labelled_claims(claim_nodes):
        linked = [texts[i] for i in (node.metadata or {}).get(LINKS_KEY, []) if i in texts][:k]
        if linked:
            out.append(ArchiveClaim(node.node_id, node.get_content(), label.value, tuple(linked)))
    return out


def index_verifier(index_dir: str | Path) -> ClaimVerifier | None:
    """The archive verifier ``carag index --calibrate`` saved with the index, or ``None`` (the shipped one);
    one object per saved verifier (its weights load once, however many synthesizers use it)."""
    config = (Path(index_dir) / VERIFIER_DIR / CONFIG_NAME).resolve()
    if not config.is_file():
        return None
    return _saved_verifier(str(config.parent), config.stat().st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _saved_verifier(folder: str, modified: int) -> ClaimVerifier:
    """The verifier saved in ``folder`` (``modified``: its config's mtime, so a re-fit is loaded anew)."""
    verifier = ClaimVerifier(folder)
    logger.info("the index's archive verifier: %s", verifier.config.get("archive", {}).get("choice"))
    return verifier


def _folds(claims: Sequence[ArchiveClaim], seed: int = 0) -> list[int]:
    """Each claim's fold (0 or 1), stratified by label."""
    rng = np.random.default_rng(seed)
    fold = [0] * len(claims)
    for label in LABELS:
        idx = [i for i, c in enumerate(claims) if c.label == label]
        for j, i in enumerate(rng.permutation(idx)):
            fold[int(i)] = j % FOLDS
    return fold


def fine_tune_pairs(verifier: ClaimVerifier, claims: Sequence[ArchiveClaim]) -> list[Pair]:
    """The fine-tuning pairs of ``claims`` (module docstring)."""
    pairs: list[Pair] = []
    scored: list[tuple[ArchiveClaim, list[str]]] = []
    for c in claims:
        for passage in c.passages:
            chunks = chunk_passage(passage, verifier.chunk_words)
            if c.label == "NOT_ENOUGH_INFO":
                pairs.extend(Pair(c.claim_id, c.claim, t, c.label, "archive") for t in chunks)
            elif len(chunks) == 1:
                pairs.append(Pair(c.claim_id, c.claim, chunks[0], c.label, "archive"))
            else:
                scored.append((c, chunks))
    if scored:
        probs = verifier.pair_probabilities([(c.claim, t) for c, chunks in scored for t in chunks])
        at = 0
        for c, chunks in scored:
            block = probs[at : at + len(chunks), LABELS.index(c.label)]
            pairs.append(Pair(c.claim_id, c.claim, chunks[int(block.argmax())], c.label, "archive"))
            at += len(chunks)
    return pairs


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
    return ClaimVerifier(base.path, threshold=base.threshold, cross_encoder=model)


def _head_out_of_fold(probs: Sequence[np.ndarray], gold: Sequence[str]) -> dict[str, float]:
    """A :class:`LabelHead`'s claim-level figures out of fold (:data:`HEAD_FOLDS` stratified folds, seed 0)."""
    from sklearn.model_selection import StratifiedKFold

    pred = np.empty(len(gold), dtype=object)
    folds = StratifiedKFold(HEAD_FOLDS, shuffle=True, random_state=0)
    for train, held in folds.split(np.zeros(len(gold)), gold):
        head = LabelHead().fit([probs[i] for i in train], [gold[i] for i in train])
        pred[held] = head.predict([probs[i] for i in held])
    return claim_figures(gold, [str(p) for p in pred])


def fit_archive_verifier(
    claims: Sequence[ArchiveClaim],
    out_dir: str | Path,
    *,
    base: ClaimVerifier | None = None,
    config: TrainingConfig = FINE_TUNE,
) -> dict[str, Any]:
    """Fit what the archive can afford (module docstring) and save it to ``out_dir`` when it wins.

    Returns the record: the choice (one of :data:`CANDIDATES`), each candidate's out-of-fold figures (and
    threshold), the claim counts and the seconds it took.
    """
    from llama_index_carag.verifier.model import shipped_verifier

    started = time.perf_counter()
    base = base or shipped_verifier()
    claims = [c for c in claims if c.passages and c.label in LABELS]
    gold = [c.label for c in claims]
    counts = {k: gold.count(k) for k in LABELS}
    record: dict[str, Any] = {"claims": len(claims), "labels": counts, "margin": MARGIN, "folds": FOLDS}
    if len(claims) < MIN_THRESHOLD:
        record.update(choice="shipped", why=f"fewer than {MIN_THRESHOLD} labelled claims with evidence")
        return _finish(record, None, out_dir, started)
    shipped_probs = base.batch_probabilities([(c.claim, list(c.passages)) for c in claims])
    t_threshold, fig_threshold = choose_threshold(shipped_probs, gold)
    found: dict[str, dict[str, Any]] = {
        "shipped": {"threshold": base.threshold, **claim_figures(gold, [base.decide(p).label for p in shipped_probs])},
        "threshold": {"threshold": t_threshold, **fig_threshold},
    }
    oof: list[np.ndarray] = []
    if len(claims) >= MIN_FINE_TUNE and min(counts.values()) >= MIN_PER_LABEL:
        found["head"] = _head_out_of_fold(shipped_probs, gold)
        oof = _fine_tuned_out_of_fold(base, claims, config)
        t_tuned, fig_tuned = choose_threshold(oof, gold)
        found["fine-tune"] = {"threshold": t_tuned, **fig_tuned}
        found["fine-tune + head"] = _head_out_of_fold(oof, gold)
    else:
        why = f"needs {MIN_FINE_TUNE} claims with {MIN_PER_LABEL} of each label"
        found.update({name: {"skipped": why} for name in CANDIDATES[2:]})
    record["candidates"] = found
    best = "shipped"
    for name in CANDIDATES[1:]:
        if "macro_f1" in found[name] and found[name]["macro_f1"] >= found[best]["macro_f1"] + MARGIN:
            best = name
    record["choice"] = best
    if best == "shipped":
        return _finish(record, None, out_dir, started)
    if best == "threshold":
        return _finish(record, ClaimVerifier(base.path, threshold=t_threshold), out_dir, started)
    if best == "head":
        verifier = ClaimVerifier(base.path, threshold=base.threshold)
        verifier.head = LabelHead().fit(shipped_probs, gold)
        return _finish(record, verifier, out_dir, started)
    with tempfile.TemporaryDirectory(prefix="carag-archive-") as tmp:
        tuned = _fine_tuned(base, fine_tune_pairs(base, claims), Path(tmp) / "all", config)
        tuned.threshold = found["fine-tune"]["threshold"]
        if best == "fine-tune + head":
            tuned.head = LabelHead().fit(oof, gold)
        return _finish(record, tuned, out_dir, started)


def _fine_tuned_out_of_fold(
    base: ClaimVerifier, claims: Sequence[ArchiveClaim], config: TrainingConfig
) -> list[np.ndarray]:
    """Every claim's passage probabilities from the verifier fine-tuned on the other fold (:data:`FOLDS`)."""
    folds = _folds(claims)
    oof: list[np.ndarray] = [np.zeros((0, 3))] * len(claims)
    with tempfile.TemporaryDirectory(prefix="carag-archive-") as tmp:
        for f in range(FOLDS):
            train = [c for c, k in zip(claims, folds) if k != f]
            tuned = _fine_tuned(base, fine_tune_pairs(base, train), Path(tmp) / f"fold{f}", config)
            held = [i for i, k in enumerate(folds) if k == f]
            for i, p in zip(
                held, tuned.batch_probabilities([(claims[i].claim, list(claims[i].passages)) for i in held])
            ):
                oof[i] = p
            logger.info("archive fold %d/%d fine-tuned on %d claims", f + 1, FOLDS, len(train))
    return oof


def _finish(record: dict[str, Any], verifier: ClaimVerifier | None, out_dir: str | Path, started: float) -> dict:
    """Save ``verifier`` (or remove a stale one) with ``record``; the record with its cost."""
    folder = Path(out_dir)
    record["seconds"] = round(time.perf_counter() - started, 1)
    if verifier is None:
        shutil.rmtree(folder, ignore_errors=True)
        return record
    if record["choice"] in ("threshold", "head"):  # the shipped weights read anew: no copy of the weights
        folder.mkdir(parents=True, exist_ok=True)
        head = verifier.head.to_dict() if verifier.head is not None else None
        config = {**verifier.config, "threshold": verifier.threshold, "head": head, "weights": "shipped"}
        config["archive"] = record
        (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return record
    staging = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    verifier.save(staging, archive=record)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return record
