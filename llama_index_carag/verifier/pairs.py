"""Training pairs for the claim verifier: a labelled pool split by claim, and NOT_ENOUGH_INFO pairs mined for it.

The pool (``pairs.csv``: ``dataset, claim_id, claim, evidence_id, evidence, label``) holds few NOT_ENOUGH_INFO
pairs (Climate-FEVER's only).  :func:`mine_unrelated` adds them the way a retriever would produce them: each
claim is paired with the passage BM25 ranks highest for it among the passages of *other* claims (never one of
its own evidence group: claims that share a passage are one group), labelled NOT_ENOUGH_INFO.  The split is by
claim (a claim's pairs, and the pairs mined for it, are on one side), decided by a hash of the claim id, so it
does not depend on row order.
"""

from __future__ import annotations

import csv
import hashlib
import logging
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from llama_index_carag.verdicts.types import LABELS

logger = logging.getLogger(__name__)
_WORD_RE = re.compile(r"[A-Za-z][\w'-]*")


@dataclass(frozen=True)
class Pair:
    """One labelled (claim, passage) pair; ``source`` names where it came from (a pool dataset, ``mined``, …)."""

    claim_id: str
    claim: str
    passage: str
    label: str
    source: str


def file_sha256(path: str | Path) -> str:
    """The hex SHA-256 of a file (recorded with a trained model, so its data can be checked)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_pairs(path: str | Path) -> list[Pair]:
    """The pool's rows as :class:`Pair` objects (rows with an empty claim or passage are skipped)."""
    out: list[Pair] = []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            label = row["label"].strip()
            if label not in LABELS:
                raise ValueError(f"{path}: label {label!r} of claim {row['claim_id']!r} is not one of {LABELS}.")
            claim, passage = " ".join(row["claim"].split()), " ".join(row["evidence"].split())
            if claim and passage:
                out.append(Pair(row["claim_id"], claim, passage, label, row["dataset"]))
    return out


def is_validation(claim_id: str, share: float) -> bool:
    """Whether a claim belongs to the validation side (a stable hash of its id, ``share`` of all claims)."""
    h = int.from_bytes(hashlib.sha256(claim_id.encode("utf-8")).digest()[:8], "big")
    return h / 2**64 < share


def _groups(pairs: Sequence[Pair]) -> dict[str, int]:
    """Claim id -> group id: claims that share a passage (same text) are one group (union-find)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first_owner: dict[str, str] = {}
    for p in pairs:
        owner = first_owner.setdefault(p.passage, p.claim_id)
        a, b = find(owner), find(p.claim_id)
        if a != b:
            parent[a] = b
    roots: dict[str, int] = {}
    return {p.claim_id: roots.setdefault(find(p.claim_id), len(roots)) for p in pairs}


_NOT_NAMES = frozenset(
    [
        "The",
        "There",
        "This",
        "That",
        "These",
        "Those",
        "Its",
        "His",
        "Her",
        "Their",
        "They",
        "She",
        "Was",
        "Were",
        "Has",
        "Had",
        "And",
        "But",
    ]
)


def _names(claim: str) -> set[str]:
    """The claim's capitalised words (its names, roughly), common sentence openers left out."""
    return {w for w in _WORD_RE.findall(claim) if w[0].isupper() and len(w) > 2 and w not in _NOT_NAMES}


def mine_unrelated(
    pairs: Sequence[Pair],
    per_dataset: dict[str, int],
    *,
    seed: int = 0,
    candidates: int = 30,
    name_free: Iterable[str] = ("fever",),
) -> list[Pair]:
    """NOT_ENOUGH_INFO pairs: for up to ``per_dataset[d]`` claims of dataset ``d`` (a seeded sample), the passage
    BM25 ranks highest for the claim among the passages of other claim groups of the same dataset.

    For the datasets in ``name_free`` (FEVER: many claims about one Wikipedia article, whose sentences support or
    refute each other's claims) the passage must also not contain any of the claim's names (:func:`_names`).
    """
    name_free = set(name_free)
    import bm25s

    out: list[Pair] = []
    rng = random.Random(seed)
    groups = _groups(pairs)
    for dataset, wanted in per_dataset.items():
        rows = [p for p in pairs if p.source == dataset]
        if not rows or wanted <= 0:
            continue
        passages = sorted({p.passage for p in rows})
        owners: dict[str, set[int]] = {}
        for p in rows:
            owners.setdefault(p.passage, set()).add(groups[p.claim_id])
        claims = sorted({(p.claim_id, p.claim) for p in rows})
        chosen = rng.sample(claims, min(wanted, len(claims)))
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(passages, stopwords="en", show_progress=False), show_progress=False)
        hits, _ = retriever.retrieve(
            bm25s.tokenize([c for _, c in chosen], stopwords="en", show_progress=False),
            k=min(candidates, len(passages)),
            show_progress=False,
        )
        for (claim_id, claim), row in zip(chosen, hits):
            own, names = groups[claim_id], _names(claim) if dataset in name_free else set()
            for j in row:
                text = passages[int(j)]
                if own not in owners[text] and not names & set(_WORD_RE.findall(text)):
                    out.append(Pair(claim_id, claim, text, "NOT_ENOUGH_INFO", "mined"))
                    break
        logger.info("mined NOT_ENOUGH_INFO pairs for %d claims of %s", len(chosen), dataset)
    return out


def label_counts(pairs: Iterable[Pair]) -> dict[str, int]:
    """Pairs per label, in :data:`LABELS` order."""
    counts = dict.fromkeys(LABELS, 0)
    for p in pairs:
        counts[p.label] += 1
    return counts
