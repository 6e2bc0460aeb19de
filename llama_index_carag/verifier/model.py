"""The claim verifier: a cross-encoder that reads (claim, passage) and gives P(SUPPORTED), P(REFUTED), P(NEI).

:class:`ClaimVerifier` loads a verifier folder (a sentence-transformers ``CrossEncoder`` with three labels and a
``verifier.json``, its :class:`~llama_index_carag.verifier.config.VerifierConfig`: thresholds, rule, head,
confidence map, and the record of its fit); without a path it loads the model
shipped inside this package (``llama_index_carag/verifier/weights``, trained on public claim-evidence pairs
only: its ``MODEL_CARD.md``).  Nothing is downloaded.

A passage longer than ``chunk_words`` words is cut into chunks of whole sentences (the project's sentence
splitter); each chunk is scored with the claim and the passage takes the probabilities of its most decisive
chunk (the one least likely NOT_ENOUGH_INFO), as MiniCheck does.  The claim's label from its passages is
:func:`decide_label`: by default the strongest support against the strongest refutation, NOT_ENOUGH_INFO when
neither reaches its threshold (an archive-fitted verifier may read the passages' mean instead, or a head).

:meth:`ClaimVerifier.decide` then weighs the cost of being wrong: the label's raw score becomes a confidence,
P(right), through the folder's :class:`~llama_index_carag.verifier.confidence.LabelConfidence`, and a SUPPORTED
or REFUTED whose confidence is under :data:`MIN_CONFIDENCE` is withheld: NOT_ENOUGH_INFO, with the reason.  With
a wrong label costing :data:`COST_WRONG` and an abstention :data:`COST_ABSTAIN`, a label is worth giving only when
``P(right) * 0 + (1 - P(right)) * COST_WRONG < COST_ABSTAIN``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_carag.verdicts.types import LABELS
from llama_index_carag.verifier.confidence import LabelConfidence
from llama_index_carag.verifier.config import CONFIG_NAME, VerifierConfig
from llama_index_carag.verifier.head import LabelHead

logger = logging.getLogger(__name__)

#: The folder of the verifier shipped with the package.
SHIPPED_DIR = Path(__file__).resolve().parent / "weights"
#: The index's sub-folder holding its verifier (the domain check's or the archive's fit).
VERIFIER_DIR = "verifier"
_SUPPORTED, _REFUTED, _NEI = range(3)
#: How :func:`decide_label` reads the passages: the strongest support against the strongest refutation, each
#: against its threshold; or the label of the passages' mean probabilities.
RULES = ("strongest", "mean")
#: What a wrong SUPPORTED or REFUTED costs, and what an abstention (NOT_ENOUGH_INFO) costs.
COST_WRONG, COST_ABSTAIN = 2.0, 1.0
#: A SUPPORTED or REFUTED is given only at this confidence or more (module docstring).
MIN_CONFIDENCE = 1.0 - COST_ABSTAIN / COST_WRONG


@dataclass(frozen=True)
class VerifierLabel:
    """The claim's label from its passages' probabilities.

    ``passages``: the 1-based passages the label rests on (strongest first); ``probabilities``: each passage's
    P(SUPPORTED), P(REFUTED), P(NOT_ENOUGH_INFO) (shape ``(n, 3)``); ``reason``: one line that says why;
    ``score``: the rule's raw score for the label (its strongest passage's probability, the passages' mean
    probability, or the head's probability; for the threshold rule's NOT_ENOUGH_INFO, one minus the strongest
    stance); ``confidence``: P(the label is right) (:meth:`ClaimVerifier.decide`; ``None`` from
    :func:`decide_label` alone).
    """

    label: str
    passages: tuple[int, ...]
    reason: str
    probabilities: np.ndarray
    score: float = 0.0
    confidence: float | None = None


def decide_label(
    probabilities: np.ndarray,
    threshold: float,
    head: LabelHead | None = None,
    *,
    refuted_threshold: float | None = None,
    rule: str = "strongest",
) -> VerifierLabel:
    """The claim's label from its passages' probabilities (rows: passages; columns: :data:`LABELS`).

    ``rule="mean"``: the label whose mean probability over the passages is largest (the thresholds are not read).
    Else, without ``head`` (the threshold rule): ``s``, ``r`` are the largest P(SUPPORTED) and P(REFUTED) over the
    passages; SUPPORTED needs ``s >= threshold``, REFUTED ``r >= refuted_threshold`` (default: ``threshold``);
    when both pass, the one further above its threshold wins (SUPPORTED on a tie); when neither passes (or there
    is no passage), NOT_ENOUGH_INFO.  With one threshold this is "NOT_ENOUGH_INFO when both are below it, else
    SUPPORTED if ``s >= r``".  With an archive's fitted :class:`~llama_index_carag.verifier.head.LabelHead` the
    head's most probable label.  The label rests on the passages whose stance is the label's, strongest first
    (for NOT_ENOUGH_INFO: the closest to a stance).
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}; got {rule!r}.")
    probs = np.asarray(probabilities, dtype=np.float64).reshape(-1, len(LABELS))
    if not len(probs):
        return VerifierLabel("NOT_ENOUGH_INFO", (), "no passage to read", probs, score=1.0)
    s, r = float(probs[:, _SUPPORTED].max()), float(probs[:, _REFUTED].max())
    t_s, t_r = threshold, threshold if refuted_threshold is None else refuted_threshold
    if head is not None:
        p_label = head.predict_proba([probs])[0]
        column = int(p_label.argmax())
        score = float(p_label[column])
        prefix = f"the archive's head on the passages' probabilities: P({LABELS[column]}) {score:.2f}; "
    elif rule == "mean":
        mean = probs.mean(axis=0)
        column = int(mean.argmax())
        score = float(mean[column])
        prefix = f"the passages' mean P({LABELS[column]}) {score:.2f}; "
    else:
        if s >= t_s and r >= t_r:
            column = _SUPPORTED if s - t_s >= r - t_r else _REFUTED
        else:
            column = _SUPPORTED if s >= t_s else _REFUTED if r >= t_r else _NEI
        score = 1.0 - max(s, r) if column == _NEI else (s if column == _SUPPORTED else r)
        prefix = ""
    if column == _NEI:
        closest = np.argsort(-(1.0 - probs[:, _NEI]), kind="stable")
        why = f"no passage supports or refutes the claim (strongest {max(s, r):.2f}"
        if head is not None or rule == "mean":
            why += ")"
        elif t_s == t_r:
            why += f" < {t_s:.2f})"
        else:
            why += f"; support {s:.2f} < {t_s:.2f}, refutation {r:.2f} < {t_r:.2f})"
        return VerifierLabel("NOT_ENOUGH_INFO", tuple(int(i) + 1 for i in closest[:3]), prefix + why, probs, score)
    stance = probs.argmax(axis=1)
    best = int(probs[:, column].argmax())
    same = [int(i) for i in np.argsort(-probs[:, column], kind="stable") if stance[i] == column and i != best]
    order = [best, *same]
    verb = "supports" if column == _SUPPORTED else "refutes"
    why = f"passage [{best + 1}] {verb} the claim (p={probs[best, column]:.2f})"
    return VerifierLabel(LABELS[column], tuple(i + 1 for i in order[:3]), prefix + why, probs, score)


def decisive_chunk(block: np.ndarray) -> int:
    """The row of a passage's chunk probabilities (shape ``(chunks, 3)``) it takes: the least NOT_ENOUGH_INFO."""
    return int((1.0 - block[:, _NEI]).argmax())


def chunk_passage(passage: str, chunk_words: int) -> list[str]:
    """``passage`` cut into chunks of whole sentences of at most ``chunk_words`` words each (a longer sentence is
    a chunk of its own); a passage of at most ``chunk_words`` words is one chunk."""
    if len(passage.split()) <= chunk_words:
        return [passage]
    from llama_index_carag.extraction.sentences import split_sentences

    chunks: list[str] = []
    current: list[str] = []
    words = 0
    for sentence in split_sentences(passage):
        n = len(sentence.text.split())
        if current and words + n > chunk_words:
            chunks.append(" ".join(current))
            current, words = [], 0
        current.append(sentence.text)
        words += n
    if current:
        chunks.append(" ".join(current))
    return chunks or [passage]


def write_verifier_folder(folder: str | Path, config: VerifierConfig, weights: str | Path | None = None) -> Path:
    """The one writer of a verifier folder: ``config`` as its ``verifier.json`` and, with ``weights``, the
    cross-encoder's files copied from that folder (without: ``config.weights`` must be ``"shipped"``).
    Written beside the old files and committed as one (:func:`~llama_index_carag.core.commit.replace_files`,
    ``verifier.json`` last; files of the old folder that the new one lacks are deleted): a process killed at any
    point leaves the old verifier or the new one."""
    import shutil

    from llama_index_carag.core.commit import is_bookkeeping, replace_files

    if (weights is None) != (config.weights == "shipped"):
        raise ValueError(
            "a verifier folder has its own weights (pass weights=) or names the shipped ones (weights='shipped')."
        )
    target = Path(folder)
    if weights is None and target.resolve() == SHIPPED_DIR:
        raise ValueError(f"{target} holds the shipped weights: a config naming them would replace them.")

    def write(staging: Path) -> list[str]:
        if weights is not None:
            source = Path(weights)
            for path in sorted(source.rglob("*")):
                if path.is_file() and path.name != CONFIG_NAME:
                    (staging / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, staging / path.relative_to(source))
        (staging / CONFIG_NAME).write_text(config.to_json_text(), encoding="utf-8")
        new = {p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file()}
        old = (p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
        return sorted(r for r in old if r not in new and not is_bookkeeping(r))

    replace_files(target, write, last=[CONFIG_NAME])
    return target


def remove_verifier_folder(folder: str | Path) -> None:
    """Remove a verifier folder: its ``verifier.json`` first (one atomic unlink: from then on it is no verifier
    folder), then the rest."""
    import shutil

    from llama_index_carag.core.writer_lock import switching

    target = Path(folder)
    if target.is_dir():
        with switching(target):  # no load reads it meanwhile
            (target / CONFIG_NAME).unlink(missing_ok=True)
    shutil.rmtree(target, ignore_errors=True)


@functools.lru_cache(maxsize=1)
def shipped_verifier() -> ClaimVerifier:
    """The verifier shipped with the package (loaded once per process; its weights on first use)."""
    return ClaimVerifier()


def index_verifier(index_dir: str | os.PathLike[str]) -> ClaimVerifier | None:
    """The verifier ``carag index`` saved with the index (its domain check, or the archive's fit of
    ``--calibrate``), or ``None`` (the shipped one); one object per saved verifier (its weights load once)."""
    config = (Path(index_dir) / VERIFIER_DIR / CONFIG_NAME).resolve()
    if not config.is_file():
        return None
    return _saved_verifier(str(config.parent), config.stat().st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _saved_verifier(folder: str, modified: int) -> ClaimVerifier:
    """The verifier saved in ``folder`` (``modified``: its config's mtime, so a re-fit is loaded anew)."""
    verifier = ClaimVerifier(folder)
    logger.info("the index's verifier: %s", verifier.fitted_by)
    return verifier


def _clean(text: Any) -> str:
    """``text`` as a string the tokenizer takes: lone surrogates (invalid Unicode) become ``?``."""
    return str(text).encode("utf-8", "replace").decode("utf-8")


class ClaimVerifier:
    """(claim, passage) -> P(SUPPORTED), P(REFUTED), P(NOT_ENOUGH_INFO), and the claim's label from its passages.

    Args:
        path: a verifier folder (``save`` writes one); default: the verifier shipped with the package.
        config: its settings instead of the folder's ``verifier.json`` (a model just trained, not yet saved).
        threshold: the decision threshold of :func:`decide_label` (default: the config's).
        batch_size: pairs per forward pass.
        device: torch device (default CPU).
        cross_encoder: an already loaded ``CrossEncoder`` for this folder (a model just trained), else loaded
            from the folder on first use.

    Its decision settings (``threshold``, ``refuted_threshold``, ``rule``, ``head``, ``confidence``) are
    attributes that a fit may set; :meth:`to_config` is them as a
    :class:`~llama_index_carag.verifier.config.VerifierConfig`.  Loading reads the weights once;
    :meth:`probabilities` and :meth:`label` are cheap per call (six short passages: well under a second on two
    CPU cores).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        config: VerifierConfig | None = None,
        threshold: float | None = None,
        batch_size: int = 32,
        device: str = "cpu",
        cross_encoder: Any = None,
    ) -> None:
        folder = Path(path) if path is not None else SHIPPED_DIR
        #: the folder's settings as read (``None`` when given): its weights, loaded later, must still match them
        self._read_config: VerifierConfig | None = None
        if config is None:
            _finish_commit(folder)
            config = self._read_config = VerifierConfig.read(folder)
        self.path = folder
        #: what produced this verifier (its config's record: training, archive, domain_check, reference outputs)
        self.record: dict[str, Any] = dict(config.record)
        self.threshold = float(config.threshold if threshold is None else threshold)
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1]; got {self.threshold}.")
        #: the REFUTED threshold when it differs from ``threshold`` (a domain check's, :mod:`.domain`), else ``None``
        self.refuted_threshold = config.refuted_threshold
        self.chunk_words = config.chunk_words
        self.max_length = config.max_length
        #: the archive's claim-level head (``carag index --calibrate``), else ``None``: the rule decides
        self.head = LabelHead.from_dict(config.head) if config.head else None
        #: how the passages are read (:data:`RULES`)
        self.rule: str = config.rule
        #: raw score -> P(right) (:class:`~llama_index_carag.verifier.confidence.LabelConfidence`), or ``None``
        self.confidence = LabelConfidence.from_dict(config.confidence) if config.confidence else None
        #: whether it runs on the shipped model's weights (a thresholds-only fit), not a model of its own
        self.shipped_weights = cross_encoder is None and (
            config.weights == "shipped" or folder.resolve() == SHIPPED_DIR
        )
        #: where the cross-encoder's files are: this folder, or the shipped model's
        self.weights_dir = SHIPPED_DIR if self.shipped_weights else folder
        self.batch_size = batch_size
        self.device = device
        self._model: Any = cross_encoder

    @property
    def cross_encoder(self) -> Any:
        """The sentence-transformers ``CrossEncoder`` (loaded on first use, in float32, under the folder's shared
        lock: a re-fit committing a new verifier folder meanwhile waits, so the weights are read whole)."""
        if self._model is None:
            import torch
            from sentence_transformers import CrossEncoder

            from llama_index_carag.core.writer_lock import reading

            with reading(self.weights_dir):
                self._check_unchanged()
                self._model = CrossEncoder(
                    str(self.weights_dir),
                    device=self.device,
                    max_length=self.max_length,
                    model_kwargs={"dtype": torch.float32},
                    local_files_only=True,
                )
        return self._model

    def _check_unchanged(self) -> None:
        """Under the folder's lock, before its weights load: a commit a crash left is finished, and the folder
        still holds the settings this verifier read (a re-fit since would pair them with other weights).

        Raises:
            ValueError: the folder was written again since.
        """
        if self._read_config is None or self.weights_dir != self.path:
            return
        _finish_commit(self.path)
        if VerifierConfig.read(self.path) != self._read_config:
            raise ValueError(
                f"{self.path} was written again since this verifier read its settings: load it again "
                "(ClaimVerifier(path), or restart the server)."
            )

    def pair_probabilities(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """P(label) for each (claim, text) pair as given (no chunking), shape ``(n, 3)``."""
        if not pairs:
            return np.zeros((0, len(LABELS)))
        out = self.cross_encoder.predict(
            [(_clean(c), _clean(t)) for c, t in pairs],
            batch_size=self.batch_size,
            apply_softmax=True,
            show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float64).reshape(len(pairs), len(LABELS))

    def probabilities(self, claim: str, passages: Sequence[str]) -> np.ndarray:
        """Each passage's P(SUPPORTED), P(REFUTED), P(NOT_ENOUGH_INFO), shape ``(len(passages), 3)``: long passages
        are chunked and take their most decisive chunk's probabilities."""
        return self.readings(claim, passages)[0]

    def readings(self, claim: str, passages: Sequence[str]) -> tuple[np.ndarray, list[str]]:
        """:meth:`probabilities` with the text each row was read from: a passage's most decisive chunk (the
        passage itself when it is one chunk) — what an explanation of the stance should quote."""
        (passage_chunks,) = self.chunk_probabilities([(claim, list(passages))])
        rows, texts = [], []
        for chunks, block in passage_chunks:
            at = decisive_chunk(block)
            rows.append(block[at])
            texts.append(chunks[at])
        return np.array(rows).reshape(-1, len(LABELS)), texts

    def chunk_probabilities(
        self, items: Sequence[tuple[str, Sequence[str]]]
    ) -> list[list[tuple[list[str], np.ndarray]]]:
        """Per claim, per passage: its chunks and each chunk's P(label) (shape ``(chunks, 3)``), from one batched
        pass over every chunk of every claim."""
        split = [[chunk_passage(str(p), self.chunk_words) for p in passages] for _, passages in items]
        pairs = [(claim, t) for (claim, _), passages in zip(items, split) for chunks in passages for t in chunks]
        probs = self.pair_probabilities(pairs)
        out, at = [], 0
        for passages in split:
            claim_chunks = []
            for chunks in passages:
                claim_chunks.append((chunks, probs[at : at + len(chunks)]))
                at += len(chunks)
            out.append(claim_chunks)
        return out

    def batch_probabilities(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[np.ndarray]:
        """:meth:`probabilities` for many claims at once: each passage takes its most decisive chunk's row."""
        return [
            np.array([block[decisive_chunk(block)] for _, block in passages]).reshape(-1, len(LABELS))
            for passages in self.chunk_probabilities(items)
        ]

    def decide(self, probabilities: np.ndarray) -> VerifierLabel:
        """The claim's label from its passages' probabilities: :func:`decide_label` with this verifier's rule,
        thresholds and head; then its confidence, P(right), and a SUPPORTED or REFUTED under
        :data:`MIN_CONFIDENCE` withheld as NOT_ENOUGH_INFO (module docstring).  Without a fitted confidence map
        the raw score stands in for the confidence."""
        found = decide_label(
            probabilities, self.threshold, self.head, refuted_threshold=self.refuted_threshold, rule=self.rule
        )
        sure = self._confidence(found.label, found.score)
        if found.label == "NOT_ENOUGH_INFO" or sure >= MIN_CONFIDENCE:
            return replace(found, confidence=sure)
        probs = found.probabilities
        nei = float(probs[:, _NEI].mean()) if self.rule == "mean" else 1.0 - float(probs[:, :_NEI].max())
        reason = (
            f"{found.reason}, but only {sure:.0%} sure, under the {MIN_CONFIDENCE:.0%} a {found.label} needs "
            f"(a wrong one costs {COST_WRONG / COST_ABSTAIN:g}x an abstention)"
        )
        withheld = self._confidence("NOT_ENOUGH_INFO", nei)
        return replace(found, label="NOT_ENOUGH_INFO", reason=reason, score=nei, confidence=withheld)

    def _confidence(self, label: str, score: float) -> float:
        return self.confidence.predict(label, score) if self.confidence is not None else float(score)

    def label(self, claim: str, passages: Sequence[str]) -> VerifierLabel:
        """The claim's label from ``passages``: :meth:`probabilities`, then :meth:`decide`."""
        return self.decide(self.probabilities(claim, passages))

    @property
    def fitted_by(self) -> str:
        """Which fit made this verifier, for people: the archive's choice, the domain check, or training."""
        if "archive" in self.record:
            return f"the archive's fit ({self.record['archive'].get('choice')})"
        return "the domain check" if "domain_check" in self.record else "training on the pool"

    def save(self, path: str | Path, *, name_shipped: bool = False, **record: Any) -> Path:
        """Write this verifier to the folder ``path`` with ``record`` added to its record
        (:func:`write_verifier_folder`: a crash leaves the old folder or the new one): its settings and its
        cross-encoder's weights (float16 safetensors), whatever they are now (a model trained in place included).

        Args:
            name_shipped: write only ``verifier.json``, naming the shipped weights instead of copying them (a fit
                of thresholds or a head on the shipped model, unchanged).

        Raises:
            ValueError: ``name_shipped`` for a verifier that does not run on the shipped weights.
        """
        import tempfile

        import torch

        config = self.to_config(**record)
        if name_shipped:
            if not self.shipped_weights:
                raise ValueError(f"{self.path} has weights of its own: save them (name_shipped=False).")
            return write_verifier_folder(path, config)
        config = config.model_copy(update={"weights": "own"})
        with tempfile.TemporaryDirectory(prefix="carag-verifier-") as tmp:
            model = self.cross_encoder
            model.model.to(torch.float16)
            try:
                model.save_pretrained(tmp, safe_serialization=True)
            finally:
                model.model.to(torch.float32)
            return write_verifier_folder(path, config, weights=tmp)

    def to_config(self, **record: Any) -> VerifierConfig:
        """This verifier's settings as a :class:`~llama_index_carag.verifier.config.VerifierConfig`, its record
        with ``record`` added."""
        return VerifierConfig(
            threshold=self.threshold,
            refuted_threshold=self.refuted_threshold,
            rule=self.rule,
            chunk_words=self.chunk_words,
            max_length=self.max_length,
            head=self.head.to_dict() if self.head is not None else None,
            confidence=self.confidence.to_dict() if self.confidence is not None else None,
            weights="shipped" if self.shipped_weights else "own",
            record={**self.record, **record},
        )


def _finish_commit(folder: Path) -> None:
    """A write into ``folder`` that a crash interrupted after its commit is finished before it is read."""
    from llama_index_carag.core.commit import RECORD, roll_forward
    from llama_index_carag.core.writer_lock import reading

    if (folder / RECORD).is_file():
        with reading(folder):  # a record seen under the folder's lock is a dead writer's
            roll_forward(folder)
