"""Claim-extraction benchmark: FactVer claims among non-check-worthy sentences, in short texts.

How the benchmark is built (:func:`build_texts`, at run time from FactVer's CSV; nothing is copied):

- Claims: FactVer's claims (``Claim_text``, one per claim id, via ``load_factver``), split by the
  retrieval protocol's :func:`~research.new_claims.claim_half` (the parity of
  ``sha256(claim id)``): ``split="tune"`` takes half 0, ``split="report"`` half 1.  Claims are
  de-duplicated by normalised text, and a report claim whose text is also a tuning claim's is dropped,
  so no report text holds a claim seen while tuning.  Each claim is stripped of outer whitespace (inner
  spaces kept) and, when it does not end with ``.``, ``!`` or ``?`` (optionally before a closing quote or
  bracket), given a full stop, as it would have in running text; its gold span includes that stop.
- Other sentences: the split's own pool of questions, opinions, greetings, hedged and vague sentences
  (:mod:`research.claim_extraction_pools`; the two pools are disjoint).
- Texts: the split's claims are shuffled (``random.Random(seed)``) and dealt into texts of
  ``3..8`` sentences (uniform), each with ``1..min(3, n - 1)`` claims (uniform) and the rest drawn from the
  pool, in shuffled order, joined by a separator drawn from one space, two spaces, a line break, a blank
  line or a space and a line break.  Every claim of the split is used once.

Scores (:func:`score_texts`), with each claim and pool sentence a *piece* of known span:

- A FactVer claim counts as one gold claim however many sentences it holds.  It is *recalled* when the
  extracted claims inside it cover it exactly: one starts at its first character, one ends at its last,
  and only whitespace lies between them (a multi-sentence claim needs all its sentences).  *Recall
  (any)* only asks that some extracted claim overlaps it.
- *Precision*: extracted claims lying inside a FactVer claim / all extracted claims.
- *Span accuracy*: pieces whose start and end are both sentence boundaries of ``split_sentences`` on the
  whole text (the splitter neither merges a piece with its neighbour nor cuts it off short); and every
  extracted claim must satisfy ``text[start:end] == claim.text`` (counted as span errors).
- *False-positive rate* per kind: pool sentences overlapped by an extracted claim.
- *ms / text*: wall time of ``extract_claims`` per text.

Run ``python -m research.claim_extraction --split report`` (``--data`` FactVer's CSV,
default ``../shared/data/factver/factver_master.csv``; ``--seed``).  Choose cues or weights on
``--split tune`` only.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_index_carag.core.validation import normalize_text
from llama_index_carag.extraction.claims import CheckWorthinessScorer, ExtractedClaim, extract_claims
from llama_index_carag.extraction.sentences import split_sentences
from research.claim_extraction_pools import KINDS, REPORT_POOL, TUNING_POOL

logger = logging.getLogger(__name__)

__all__ = [
    "CLAIM_KIND",
    "Piece",
    "BenchmarkText",
    "ExtractionScores",
    "split_claims",
    "build_texts",
    "score_texts",
    "format_scores",
    "main",
]

CLAIM_KIND = "claim"
SPLITS = {"tune": 0, "report": 1}
SEPARATORS = (" ", "  ", "\n", "\n\n", " \n")
MIN_SENTENCES, MAX_SENTENCES, MAX_CLAIMS = 3, 8, 3
DEFAULT_DATA = "../shared/data/factver/factver_master.csv"
_ENDINGS = ".!?"
_CLOSERS = "\"'”’)]»"


@dataclass(frozen=True)
class Piece:
    """One placed sentence (or FactVer claim) of a benchmark text: ``text[start:end]`` and its kind."""

    start: int
    end: int
    kind: str
    claim_id: str | None = None


@dataclass(frozen=True)
class BenchmarkText:
    """A benchmark text and its pieces in order."""

    text: str
    pieces: tuple[Piece, ...]


def _as_sentence(claim: str) -> str:
    claim = claim.strip()
    return claim if claim.rstrip(_CLOSERS)[-1:] in _ENDINGS else claim + "."


def split_claims(path: Any, split: str) -> list[tuple[str, str]]:
    """``(claim id, claim sentence)`` of one half of FactVer's claims (see the module docstring)."""
    from llama_index.core.schema import MetadataMode

    from llama_index_carag.datasets import load_factver
    from research.new_claims import claim_half

    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}; got {split!r}.")
    halves: dict[int, dict[str, tuple[str, str]]] = {0: {}, 1: {}}
    for node in load_factver(path).claim_nodes:
        text = node.get_content(MetadataMode.NONE)
        if text.strip():
            halves[claim_half(node.node_id)].setdefault(normalize_text(text), (node.node_id, _as_sentence(text)))
    want = SPLITS[split]
    seen_in_tuning = set(halves[0]) if want == 1 else set()
    return [pair for key, pair in halves[want].items() if key not in seen_in_tuning]


def _compose(parts: Sequence[tuple[str, str, str | None]], rng: random.Random) -> BenchmarkText:
    text, pieces = "", []
    for i, (sentence, kind, claim_id) in enumerate(parts):
        if i:
            text += rng.choice(SEPARATORS)
        pieces.append(Piece(len(text), len(text) + len(sentence), kind, claim_id))
        text += sentence
    return BenchmarkText(text, tuple(pieces))


def build_texts(path: Any, split: str = "report", seed: int = 0) -> list[BenchmarkText]:
    """The benchmark texts of one split, seeded (see the module docstring)."""
    claims = split_claims(path, split)
    pool = TUNING_POOL if split == "tune" else REPORT_POOL
    others = [(sentence, kind, None) for kind in KINDS for sentence in pool[kind]]
    rng = random.Random(seed)
    rng.shuffle(claims)
    texts: list[BenchmarkText] = []
    while claims:
        n = rng.randint(MIN_SENTENCES, MAX_SENTENCES)
        k = min(rng.randint(1, min(MAX_CLAIMS, n - 1)), len(claims))
        taken, claims = claims[:k], claims[k:]
        parts = [(text, CLAIM_KIND, claim_id) for claim_id, text in taken] + rng.sample(others, n - k)
        rng.shuffle(parts)
        texts.append(_compose(parts, rng))
    return texts


@dataclass(frozen=True)
class ExtractionScores:
    """The benchmark's numbers for one run (see the module docstring for each)."""

    texts: int
    claims: int
    multi_sentence_claims: int
    extracted: int
    precision: float
    recall: float
    recall_any: float
    span_accuracy: float
    span_errors: int
    false_positive_rate: dict[str, float]
    ms_per_text: float


def _inside(claim: ExtractedClaim, piece: Piece) -> bool:
    return piece.start <= claim.start and claim.end <= piece.end


def _overlaps(claim: ExtractedClaim, piece: Piece) -> bool:
    return claim.start < piece.end and piece.start < claim.end


def _covers(text: str, claims: Sequence[ExtractedClaim], piece: Piece) -> bool:
    inside = sorted((c for c in claims if _inside(c, piece)), key=lambda c: c.start)
    if not inside or inside[0].start != piece.start or inside[-1].end != piece.end:
        return False
    return all(not text[a.end : b.start].strip() for a, b in zip(inside, inside[1:]))


def _ratio(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else float("nan")


def _tally(item: BenchmarkText, claims: list[ExtractedClaim], counts: dict[str, int]) -> None:
    spans = split_sentences(item.text)
    starts, ends = {s.start for s in spans}, {s.end for s in spans}
    gold = [p for p in item.pieces if p.kind == CLAIM_KIND]
    counts["span_errors"] += sum(item.text[c.start : c.end] != c.text for c in claims)
    counts["extracted"] += len(claims)
    counts["true"] += sum(any(_inside(c, p) for p in gold) for c in claims)
    counts["recalled"] += sum(_covers(item.text, claims, p) for p in gold)
    counts["recalled_any"] += sum(any(_overlaps(c, p) for c in claims) for p in gold)
    counts["exact_pieces"] += sum(p.start in starts and p.end in ends for p in item.pieces)
    counts["multi"] += sum(len(split_sentences(item.text[p.start : p.end])) > 1 for p in gold)
    for p in item.pieces:
        counts[f"n_{p.kind}"] += 1
        if p.kind != CLAIM_KIND:
            counts[f"fp_{p.kind}"] += any(_overlaps(c, p) for c in claims)


def score_texts(texts: Sequence[BenchmarkText], scorer: CheckWorthinessScorer | None = None) -> ExtractionScores:
    """Run :func:`extract_claims` on every text and score it against the pieces."""
    counts: dict[str, int] = dict.fromkeys(
        ["span_errors", "extracted", "true", "recalled", "recalled_any", "exact_pieces", "multi"], 0
    )
    for kind in (CLAIM_KIND, *KINDS):
        counts[f"n_{kind}"] = counts[f"fp_{kind}"] = 0
    times = []
    for item in texts:
        started = time.perf_counter()
        claims = extract_claims(item.text, scorer=scorer)
        times.append(time.perf_counter() - started)
        _tally(item, claims, counts)
    n_claims = counts[f"n_{CLAIM_KIND}"]
    return ExtractionScores(
        texts=len(texts),
        claims=n_claims,
        multi_sentence_claims=counts["multi"],
        extracted=counts["extracted"],
        precision=_ratio(counts["true"], counts["extracted"]),
        recall=_ratio(counts["recalled"], n_claims),
        recall_any=_ratio(counts["recalled_any"], n_claims),
        span_accuracy=_ratio(counts["exact_pieces"], sum(len(t.pieces) for t in texts)),
        span_errors=counts["span_errors"],
        false_positive_rate={k: _ratio(counts[f"fp_{k}"], counts[f"n_{k}"]) for k in KINDS},
        ms_per_text=1000 * statistics.fmean(times) if times else float("nan"),
    )


def format_scores(scores: ExtractionScores, title: str) -> str:
    """A markdown table of the scores."""
    rows = [
        (
            "texts / FactVer claims (multi-sentence)",
            f"{scores.texts} / {scores.claims} ({scores.multi_sentence_claims})",
        ),
        ("extracted claims", f"{scores.extracted}"),
        ("precision", f"{scores.precision:.3f}"),
        ("recall (exact span)", f"{scores.recall:.3f}"),
        ("recall (any overlap)", f"{scores.recall_any:.3f}"),
        ("span accuracy (splitter, all pieces)", f"{scores.span_accuracy:.3f}"),
        ("span errors (text[start:end] != claim.text)", f"{scores.span_errors}"),
        *((f"false-positive rate: {k}", f"{v:.3f}") for k, v in scores.false_positive_rate.items()),
        ("ms / text", f"{scores.ms_per_text:.2f}"),
    ]
    return "\n".join([f"### {title}", "", "| measure | value |", "|---|---:|", *(f"| {a} | {b} |" for a, b in rows)])


def main(argv: Sequence[str] | None = None) -> int:
    """Print the benchmark table for one split."""
    parser = argparse.ArgumentParser(description="Claim-extraction benchmark on FactVer claims (see module docstring).")
    parser.add_argument("--data", default=DEFAULT_DATA, help="FactVer's CSV")
    parser.add_argument("--split", choices=sorted(SPLITS), default="report")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not Path(args.data).exists():
        parser.error(f"FactVer CSV not found: {args.data}")
    texts = build_texts(args.data, args.split, args.seed)
    print(format_scores(score_texts(texts), f"Claim extraction, FactVer {args.split} split, seed {args.seed}"))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
