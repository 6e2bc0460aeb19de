"""``carag calibrate-verdicts``: measure the LLM's label lean on an index's already-checked claims, once.

A sample of ``--claims`` claims of the CSV the index was built from is scored by the LLM with the
evidence the CSV links to each (``--evidence linked``, the default; up to the index's k passages) or with
what the index retrieves for it (``--evidence retrieved``; a claim without links is always retrieved).
Their labels are never read.  Linked evidence is the default because retrieving a claim that is itself
one of the index's corpus claims finds its own evidence through its subset of interest — better evidence
than a new claim gets — and the lean measured on it over-corrected (docs/VERDICTS.md, round 4).  The mean label probabilities are saved
as ``verdict_prior.json`` in the index folder; ``carag check`` and ``carag serve`` divide them out of
every verdict of that LLM (:class:`~llama_index_carag.verdicts.labels.domain_prior.DomainLabelPrior`).
Only the whole-evidence prompt is scored (the per-passage stance prompts cost five times more and the
default decisions do not read them).  ``carag index --calibrate`` runs the same step (:func:`measure_lean`).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from llama_index_carag.cli.common import CLIError, _llm, _load_corpus, _load_retriever


def cmd_calibrate_verdicts(args: argparse.Namespace) -> int:
    corpus = _load_corpus(args.data, args)
    if not corpus.claim_nodes:
        raise CLIError(f"{args.data} has no claims to measure the label lean on")
    retriever = _load_retriever(args)
    measure_lean(corpus, retriever, _llm(args), args.index, args.claims, args.seed, args.evidence)
    return 0


def measure_lean(
    corpus: Any, retriever: Any, llm: Any, index_dir: str, n_claims: int, seed: int, evidence: str = "linked"
) -> Any:
    """Measure ``llm``'s label lean on ``n_claims`` of ``corpus``'s claims (no label read), save it in
    ``index_dir`` and print one line; the whole-evidence prompt only (what the default decisions divide out)."""
    from llama_index.core.schema import QueryBundle

    from llama_index_carag.verdicts.labels.domain_prior import DomainLabelPrior
    from llama_index_carag.verdicts.synthesizer import FactCheckSynthesizer

    synthesizer = FactCheckSynthesizer(llm, embed_model=retriever.embed_model)
    if synthesizer.label_mode != "score":
        raise CLIError(
            f"measuring the label lean needs an LLM whose label scores can be read; this one is in "
            f"{synthesizer.label_mode!r} mode"
        )
    t0 = time.perf_counter()
    prior = DomainLabelPrior(n_claims=n_claims, random_state=seed, stances=False)
    sample = [corpus.claim_nodes[i] for i in prior.sample_order(len(corpus.claim_nodes))]
    linked = _linked_evidence(corpus, retriever.settings.similarity_top_k) if evidence == "linked" else {}
    claims = [
        (c.get_content(), linked.get(c.node_id) or retriever.retrieve(QueryBundle(c.get_content()))) for c in sample
    ]
    prior.fit(synthesizer, claims)
    path = prior.persist(index_dir)
    lean = ", ".join(f"{k} {v:.2f}" for k, v in prior.summary()["joint"].items())
    print(
        f"measured the label lean of {prior.model_} on {prior.n_claims_} claims ({lean}) in "
        f"{time.perf_counter() - t0:.0f} s; saved {path}: carag check and carag serve now divide it out"
    )
    return prior


def _linked_evidence(corpus: Any, k: int) -> dict[str, list[Any]]:
    """``{claim id: its first k linked evidence passages}`` (the claim node's ``evidence_ids``, file order)."""
    from llama_index.core.schema import NodeWithScore

    from llama_index_carag.datasets import LINKS_KEY

    passages = {node.node_id: node for node in corpus.evidence_nodes}
    out: dict[str, list[Any]] = {}
    for claim in corpus.claim_nodes:
        linked = [passages[str(i)] for i in claim.metadata.get(LINKS_KEY) or [] if str(i) in passages][:k]
        if linked:
            out[claim.node_id] = [NodeWithScore(node=node, score=None) for node in linked]
    return out
