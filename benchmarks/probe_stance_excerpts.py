"""Research probe: does the chunk a long passage's stance was read from hold the sentences a person marked?

The verifier reads a passage longer than its 64-word chunks chunk by chunk and takes the most decisive chunk's
probabilities (``verifier.model.decisive_chunk``).  That chunk is the passage's **stance excerpt**: what the stance
was read from, shown to a reader beside the passage.  SciFact annotates, for each cited abstract, the rationale
sentences that support or refute the claim.  This probe counts, over SciFact's SUPPORTED and REFUTED claims'
cited abstracts of more than one chunk, how often a chunk holds at least one rationale sentence, for:

- ``excerpt``: the verifier's decisive chunk;
- ``first``: the abstract's first chunk (what a shortened passage shows);
- ``closest``: the chunk closest to the claim by MiniLM cosine (a plain highlighter);
- ``random``: a chunk drawn at random (the expected share: chunks with a rationale / chunks).

Declared before the run, on the **train** claims: the excerpt is worth showing as "why this stance" if its hit
rate beats ``first`` and ``random``.  The test claims are reported beside it, not used to decide.  Rationale
sentences are located with the package's sentence splitter on the BEIR text (SciFact's own sentence indices),
so a few are misplaced where the two segmentations differ — the same for every column.

    python benchmarks/probe_stance_excerpts.py --split train
    python benchmarks/probe_stance_excerpts.py --split test
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

from _common import SCIFACT, scifact_annotations


def cited_pairs(folder: Path, split: str) -> list[dict[str, Any]]:
    """Each SUPPORTED / REFUTED claim of ``split`` with one cited abstract and its rationale sentences."""
    from llama_index_carag.extraction.sentences import split_sentences

    corpus, annotations = scifact_annotations(folder)
    pairs = []
    for line in (folder / "verdicts.jsonl").open(encoding="utf-8"):
        claim = json.loads(line)
        if claim["split"] != split or claim["label"] == "NOT_ENOUGH_INFO":
            continue
        for doc in claim["evidence_ids"]:
            sentences = [s.text for s in split_sentences(corpus[doc])]
            marked = {i for a in annotations[claim["claim_id"]].get(doc, []) for i in a["sentences"]}
            rationale = [sentences[i] for i in sorted(marked) if i < len(sentences)]
            if rationale:
                pairs.append(
                    {"claim": claim["claim"], "label": claim["label"], "text": corpus[doc], "rationale": rationale}
                )
    return pairs


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--split", choices=("train", "test"), default="train")
    parser.add_argument("--scifact", type=Path, default=SCIFACT)
    args = parser.parse_args(argv)

    import numpy as np

    from llama_index_carag.models.resolve import resolve_embed_model
    from llama_index_carag.verifier.model import decisive_chunk, shipped_verifier

    verifier = shipped_verifier()
    encoder = resolve_embed_model("sentence-transformers/all-MiniLM-L6-v2")
    pairs = cited_pairs(args.scifact, args.split)
    read = verifier.chunk_probabilities([(p["claim"], [p["text"]]) for p in pairs])
    hits: dict[str, list[float]] = {"excerpt": [], "first": [], "closest": [], "random": []}
    by_label: dict[str, list[float]] = {"SUPPORTED": [], "REFUTED": []}
    for pair, ((chunks, block),) in zip(pairs, read):
        if len(chunks) < 2:
            continue
        held = [any(s in chunk for s in pair["rationale"]) for chunk in chunks]
        vectors = np.asarray(encoder.get_text_embedding_batch([pair["claim"], *chunks]))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        hits["excerpt"].append(float(held[decisive_chunk(block)]))
        hits["first"].append(float(held[0]))
        hits["closest"].append(float(held[int((vectors[1:] @ vectors[0]).argmax())]))
        hits["random"].append(sum(held) / len(held))
        by_label[pair["label"]].append(hits["excerpt"][-1])
    n = len(hits["excerpt"])
    print(f"SciFact {args.split}: {len(pairs)} cited abstracts with rationales, {n} of more than one chunk")
    for name, values in hits.items():
        print(f"  {name:<8} holds a rationale sentence in {sum(values) / max(n, 1):.3f} of them")
    for label, values in by_label.items():
        print(f"  excerpt, {label} claims: {sum(values) / max(len(values), 1):.3f} of {len(values)}")


if __name__ == "__main__":
    main()
