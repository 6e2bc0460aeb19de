"""The verifier adapted to an archive: a desk's own labelled claims, used to fit what they can afford.

:func:`fit_archive_verifier` (``carag index --calibrate``) compares, out of fold, what an archive's labelled claims
can buy over the shipped verifier, and keeps a change only where it wins.  The rule, fixed before any figure
on a report set was looked at:

1. Examples: each labelled claim with its passages (its linked evidence).  A fine-tune needs at least
   :data:`MIN_FINE_TUNE` claims with at least :data:`MIN_PER_LABEL` of each label; a new threshold at least
   :data:`MIN_THRESHOLD` claims.  Below that the shipped verifier stays.
2. Two folds, stratified by label (seed 0).  Per fold the shipped verifier is fine-tuned on the other fold
   (:data:`FINE_TUNE`: two epochs) and scores this fold's claims: out-of-fold probabilities for every claim.
3. Candidates: **shipped** (its own threshold), **threshold** (the shipped verifier, the threshold chosen on the
   archive) and **fine-tune** (the threshold chosen on its out-of-fold probabilities), each scored by
   claim-level macro-F1 on the archive (the two thresholds chosen on the probabilities they are scored on: one
   number each, the same for both).
4. The fine-tune is kept if it beats the better of the other two by at least :data:`MARGIN`; else the threshold
   if it beats the shipped verifier by :data:`MARGIN`; else nothing.  A kept fine-tune is trained once more on
   every claim and saved with the index (``<index>/verifier``), with the record of the comparison.

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
from llama_index_carag.verifier.model import CONFIG_NAME, ClaimVerifier, chunk_passage, decide_label
from llama_index_carag.verifier.pairs import LABELS, Pair
from llama_index_carag.verifier.training import TrainingConfig, choose_threshold, pair_macro_f1, train_pairs

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


def _macro_f1(probs: Sequence[np.ndarray], gold: Sequence[str], threshold: float) -> float:
    pred = [decide_label(p, threshold).label for p in probs]
    return pair_macro_f1([LABELS.index(g) for g in gold], [LABELS.index(x) for x in pred])


def fit_archive_verifier(
    claims: Sequence[ArchiveClaim],
    out_dir: str | Path,
    *,
    base: ClaimVerifier | None = None,
    config: TrainingConfig = FINE_TUNE,
) -> dict[str, Any]:
    """Fit what the archive can afford (module docstring) and save it to ``out_dir`` when it wins.

    Returns the record: the choice (``"shipped"``, ``"threshold"`` or ``"fine-tune"``), each candidate's
    out-of-fold macro-F1 and threshold, the claim counts and the seconds it took.
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
    shipped_f1 = _macro_f1(shipped_probs, gold, base.threshold)
    t_threshold, fig_threshold = choose_threshold(shipped_probs, gold)
    record["candidates"] = {
        "shipped": {"threshold": base.threshold, "macro_f1": round(shipped_f1, 4)},
        "threshold": {"threshold": t_threshold, **fig_threshold},
    }
    best_name, best_f1 = "shipped", shipped_f1
    if fig_threshold["macro_f1"] >= shipped_f1 + MARGIN:
        best_name, best_f1 = "threshold", fig_threshold["macro_f1"]
    if len(claims) >= MIN_FINE_TUNE and min(counts.values()) >= MIN_PER_LABEL:
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
        t_tuned, fig_tuned = choose_threshold(oof, gold)
        record["candidates"]["fine-tune"] = {"threshold": t_tuned, **fig_tuned}
        if fig_tuned["macro_f1"] >= best_f1 + MARGIN:
            best_name = "fine-tune"
    else:
        record["candidates"]["fine-tune"] = {
            "skipped": f"needs {MIN_FINE_TUNE} claims with {MIN_PER_LABEL} of each label"
        }
    record["choice"] = best_name
    if best_name == "shipped":
        return _finish(record, None, out_dir, started)
    if best_name == "threshold":
        return _finish(record, ClaimVerifier(base.path, threshold=t_threshold), out_dir, started)
    with tempfile.TemporaryDirectory(prefix="carag-archive-") as tmp:
        tuned = _fine_tuned(base, fine_tune_pairs(base, claims), Path(tmp) / "all", config)
        tuned.threshold = record["candidates"]["fine-tune"]["threshold"]
        return _finish(record, tuned, out_dir, started)


def _finish(record: dict[str, Any], verifier: ClaimVerifier | None, out_dir: str | Path, started: float) -> dict:
    """Save ``verifier`` (or remove a stale one) with ``record``; the record with its cost."""
    folder = Path(out_dir)
    record["seconds"] = round(time.perf_counter() - started, 1)
    if verifier is None:
        shutil.rmtree(folder, ignore_errors=True)
        return record
    if record["choice"] == "threshold":  # the shipped weights, a new threshold: no copy of the weights
        folder.mkdir(parents=True, exist_ok=True)
        config = {**verifier.config, "threshold": verifier.threshold, "weights": "shipped", "archive": record}
        (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return record
    staging = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    verifier.save(staging, archive=record)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return record
