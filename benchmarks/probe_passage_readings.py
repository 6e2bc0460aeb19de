"""Research probe: ways of reading a long passage from its chunks, pair by pair, with the shipped weights.

Each annotated (claim, passage) pair of a split of the evidence JSON (``benchmarks/verdict_evidence.py``) is cut
into chunks of ``--chunk-words`` words (the package's ``chunk_passage``); every chunk is scored once and each
reading below makes the passage's P(SUPPORTED), P(REFUTED), P(NOT_ENOUGH_INFO) from its chunks' rows:

* ``decisive`` — the row of the chunk least likely NOT_ENOUGH_INFO (what the package does);
* ``one_sided`` — the row of the chunk with the largest |P(S) - P(R)|;
* ``mean`` — the chunks' mean row; ``weighted`` — their mean weighted by 1 - P(NEI);
* ``hybrid`` — P(NEI) of the decisive chunk, the rest shared as the chunks' mean P(S) : P(R).

``--claim-reading`` also reads each chunk with the claim's denial (``It is not true that <claim>``; ``denied`` swaps
its S and R back, ``symmetric`` averages the two readings) or divides each row by the row for an empty claim
(``content_free``), or by the claim's row with an empty passage (``claim_prior``; ``claim_margin`` subtracts its
P(S) - P(R) instead), or by its mean row when read with the claim's four nearest corpus claims (``neighbours``;
``neighbour_margin`` subtracts their P(S) - P(R) instead).  All fell on FactVer's archive half (docs/VERDICTS.md).

Prints, per set, claim reading, chunk size and reading, the AUC of P(S) - P(R) between supporting and refuting pairs and the
AUC of P(NEI) for silent pairs (``bench_verdicts.row_aucs``).  Not wired into the package: on the archive
halves ``hybrid`` at 32 words raised SciFact's S-vs-R by 0.03, on SciFact's report claims it lowered it by 0.02
(docs/VERDICTS.md).

    python benchmarks/probe_passage_readings.py --evidence evidence.json --split archive
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

S, R, N = range(3)


def _decisive(block: np.ndarray) -> np.ndarray:
    return block[int((1.0 - block[:, N]).argmax())]


def _weighted(block: np.ndarray) -> np.ndarray:
    w = 1.0 - block[:, N]
    return (w[:, None] * block).sum(axis=0) / w.sum()


def _hybrid(block: np.ndarray) -> np.ndarray:
    nei = float(block[:, N].min())
    mean = block.mean(axis=0)
    share = mean[S] / (mean[S] + mean[R])
    return np.array([(1.0 - nei) * share, (1.0 - nei) * (1.0 - share), nei])


def negated(claim: str) -> str:
    """The claim denied by a fixed prefix: ``It is not true that <claim>`` (the first letter lowered unless the
    first word looks like an acronym)."""
    text = claim.strip()
    if len(text) > 1 and text[0].isupper() and not text[1].isupper():
        text = text[0].lower() + text[1:]
    return "It is not true that " + text


def symmetric(rows: np.ndarray, denied: np.ndarray) -> np.ndarray:
    """Rows read with the claim and with its denial, averaged: support of the claim with refutation of the denial,
    refutation with support, NEI with NEI (a stance the verifier gives both a claim and its denial cancels)."""
    return np.stack(
        [(rows[:, S] + denied[:, R]) / 2, (rows[:, R] + denied[:, S]) / 2, (rows[:, N] + denied[:, N]) / 2], axis=1
    )


#: Corpus claims a chunk is also read with for ``neighbours``.
NEIGHBOURS = 4


def neighbour_prior(
    verifier: Any, corpus: Sequence[dict[str, Any]], split: Sequence[tuple[str, list[str]]], m: int
) -> np.ndarray:
    """Each chunk's mean row when read with the ``m`` corpus claims (the archive's, labels unread) nearest its own
    claim by the default encoder (the claim's own text left out)."""
    from sentence_transformers import SentenceTransformer

    from llama_index_carag.models.files import minilm_path

    encoder = SentenceTransformer(str(minilm_path()), device="cpu")
    texts = [it["claim"] for it in corpus]
    claims = sorted({c for c, _ in split})
    sims = encoder.encode(claims, normalize_embeddings=True) @ encoder.encode(texts, normalize_embeddings=True).T
    near = {
        c: [texts[j] for j in np.argsort(-sims[i]) if texts[j].strip() != c.strip()][:m] for i, c in enumerate(claims)
    }
    rows = verifier.pair_probabilities([(n, t) for c, chunks in split for t in chunks for n in near[c]])
    return rows.reshape(-1, m, 3).mean(axis=1)


READINGS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "decisive": _decisive,
    "one_sided": lambda b: b[int(np.abs(b[:, S] - b[:, R]).argmax())],
    "mean": lambda b: b.mean(axis=0),
    "weighted": _weighted,
    "hybrid": _hybrid,
}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--evidence", required=True, help="the JSON of benchmarks/verdict_evidence.py")
    parser.add_argument("--split", default="archive", help="archive (tuning claims) or report")
    parser.add_argument("--chunk-words", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument(
        "--claim-reading",
        nargs="+",
        choices=[
            "claim",
            "denied",
            "symmetric",
            "content_free",
            "claim_prior",
            "claim_margin",
            "neighbours",
            "neighbour_margin",
        ],
        default=["claim"],
        help="read each chunk with the claim, with its denial (S and R swapped back), or both averaged",
    )
    args = parser.parse_args(argv)

    from bench_verdicts import row_aucs

    from llama_index_carag.verifier.model import chunk_passage, shipped_verifier

    verifier = shipped_verifier()
    data = json.loads(Path(args.evidence).read_text(encoding="utf-8"))
    for name in sorted(data):
        items = [it for it in data[name][args.split] if it["annotated"]]
        gold = np.array([it["gold"] for it in items for _ in it["annotated"]])
        for words in args.chunk_words:
            split = [(it["claim"], chunk_passage(str(p), words)) for it in items for p in it["annotated"]]
            rows = {"claim": verifier.pair_probabilities([(c, t) for c, chunks in split for t in chunks])}
            if {"denied", "symmetric"} & set(args.claim_reading):
                denied = verifier.pair_probabilities([(negated(c), t) for c, chunks in split for t in chunks])
                rows["denied"] = denied[:, [R, S, N]]
                rows["symmetric"] = symmetric(rows["claim"], denied)
            if "content_free" in args.claim_reading:  # each chunk's row divided by its row for an empty claim
                prior = verifier.pair_probabilities([("", t) for _, chunks in split for t in chunks])
                ratio = rows["claim"] / prior
                rows["content_free"] = ratio / ratio.sum(axis=1, keepdims=True)
            if {"claim_prior", "claim_margin"} & set(args.claim_reading):  # the claim's own lean (an empty passage)
                claims = sorted({c for c, _ in split})
                lean = dict(zip(claims, verifier.pair_probabilities([(c, "") for c in claims])))
                prior = np.array([lean[c] for c, chunks in split for _ in chunks])
                ratio = rows["claim"] / prior
                rows["claim_prior"] = ratio / ratio.sum(axis=1, keepdims=True)
                margin = rows["claim"][:, S] - rows["claim"][:, R] - (prior[:, S] - prior[:, R])
                rows["claim_margin"] = np.stack([(1 + margin) / 2, (1 - margin) / 2, rows["claim"][:, N]], axis=1)
            if {"neighbours", "neighbour_margin"} & set(args.claim_reading):
                prior = neighbour_prior(verifier, data[name]["archive"], split, NEIGHBOURS)
                ratio = rows["claim"] / prior
                rows["neighbours"] = ratio / ratio.sum(axis=1, keepdims=True)
                margin = rows["claim"][:, S] - rows["claim"][:, R] - (prior[:, S] - prior[:, R])
                rows["neighbour_margin"] = np.stack([(1 + margin) / 2, (1 - margin) / 2, rows["claim"][:, N]], axis=1)
            for claim_reading in args.claim_reading:
                probs, blocks, at = rows[claim_reading], [], 0
                for _, chunks in split:
                    blocks.append(probs[at : at + len(chunks)])
                    at += len(chunks)
                for reading, read in READINGS.items():
                    auc = row_aucs(np.array([read(b) for b in blocks]), gold)
                    sr, nei = auc["auc_s_vs_r"], auc["auc_nei"]
                    print(
                        f"{name} {args.split} {claim_reading:>9} {words:>4} words {reading:>9}: "
                        f"S-vs-R {sr:.4f}  NEI {nei:.4f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
