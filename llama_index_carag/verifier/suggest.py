"""Which claims a desk should label first: where the verifier is torn, spread over the corpus's clusters.

``carag index --suggest-labels N`` reads the corpus's unlabelled claims (a seeded sample of at most
:data:`MAX_READ`) with the passages the retriever gives them and ranks them for labelling:

* **torn** — the entropy of the verifier's mean passage probabilities (what the archive fine-tune reads); a claim
  the verifier already reads one way teaches it little;
* **spread** — the claims are taken in turns from the retriever's claim clusters (the largest cluster first), the
  most torn of each cluster at each turn, so the labels cover the corpus's themes rather than one corner of it.

The result is a list of :class:`Suggestion` (claim id, text, cluster, entropy); the CLI prints it and writes it
as a CSV with an empty ``label`` column to fill in.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llama_index_carag.verdicts.types import LABELS

logger = logging.getLogger(__name__)

#: At most this many claims are read (a seeded sample), so the cost stays bounded on a large corpus.
MAX_READ = 2000


@dataclass(frozen=True)
class Suggestion:
    """One claim worth labelling: its id, text, retriever cluster and how torn the verifier is (entropy, nats)."""

    claim_id: str
    claim: str
    cluster: int
    entropy: float


def torn(probabilities: np.ndarray) -> float:
    """The entropy (nats) of the mean of a claim's passage probabilities (rows: passages); 0 without passages."""
    probs = np.asarray(probabilities, dtype=np.float64).reshape(-1, len(LABELS))
    if not len(probs):
        return 0.0
    mean = np.clip(probs.mean(axis=0), 1e-12, 1.0)
    return float(-(mean * np.log(mean)).sum())


def suggest_labels(
    claims: Sequence[tuple[str, str, int, Sequence[str]]],
    n: int,
    *,
    verifier: Any = None,
    max_read: int = MAX_READ,
    seed: int = 0,
) -> list[Suggestion]:
    """The ``n`` claims to label first (module docstring), from ``claims``: ``(claim_id, text, cluster, passages)``
    each, the passages the retriever gives the claim.  ``verifier``: default the shipped one."""
    if n < 1:
        raise ValueError(f"n must be at least 1; got {n}.")
    if verifier is None:
        from llama_index_carag.verifier.model import shipped_verifier

        verifier = shipped_verifier()
    chosen = sorted(random.Random(seed).sample(range(len(claims)), min(max_read, len(claims))))
    read = [claims[i] for i in chosen]
    probs = verifier.batch_probabilities([(text, list(passages) or [""]) for _, text, _, passages in read])
    by_cluster: dict[int, list[Suggestion]] = {}
    for (claim_id, text, cluster, _), p in zip(read, probs):
        by_cluster.setdefault(int(cluster), []).append(Suggestion(str(claim_id), text, int(cluster), torn(p)))
    queues = sorted(by_cluster.values(), key=lambda q: (-len(q), q[0].cluster))
    for q in queues:
        q.sort(key=lambda s: (-s.entropy, s.claim_id))
    out: list[Suggestion] = []
    while len(out) < n and any(queues):
        for q in queues:
            if q and len(out) < n:
                out.append(q.pop(0))
    return out
