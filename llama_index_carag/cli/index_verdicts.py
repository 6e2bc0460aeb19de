"""The verdict half of ``carag index --calibrate``: the archive verifier, the archive decision and the LLM's lean.

Run after the index is built and saved: the verifier is adapted to the corpus claims that carry a verdict label,
with their linked evidence (:func:`~llama_index_carag.verifier.archive.fit_archive_verifier`: a new threshold or
a fine-tune, kept only where it wins out of fold; what ``carag check`` uses by default).  For
``--decision llm`` the archive decision is fitted on the same claims (each retrieved as a new claim would be; no
LLM), then the LLM's label lean is measured on a
sample of claims with their linked evidence (the LLM's whole-evidence prompt, about 10 s a claim on two
cores with the offline Qwen).  Both are saved in the index folder, where ``carag check``, ``check-text``,
``serve`` and ``chat`` find them.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from llama_index_carag.cli.common import CLIError, _llm


def calibrate_verdicts(args: argparse.Namespace, corpus: Any, retriever: Any, out: Path) -> None:
    """Fit and save the archive decision; measure and save the LLM's label lean (unless ``--no-llm``)."""
    from llama_index_carag.models.resolve import embed_model_name
    from llama_index_carag.verdicts.archive_fit import fit_archive_decision, labelled_claims, save_archive_decision
    from llama_index_carag.verifier.archive import VERIFIER_DIR, archive_claims, fit_archive_verifier

    archive = archive_claims(corpus.claim_nodes, corpus.evidence_nodes, retriever.settings.similarity_top_k)
    record = fit_archive_verifier(archive, out / VERIFIER_DIR)
    print(_verifier_line(record))
    labelled = labelled_claims(corpus.claim_nodes)
    if labelled:
        t0 = time.perf_counter()
        decision = fit_archive_decision(retriever, corpus.claim_nodes, show_progress=True)
        save_archive_decision(out, decision, embed_model_name(retriever.embed_model))
        print(f"verdict decision: {decision.reason()}; {time.perf_counter() - t0:.0f} s")
    else:
        print("verdict decision: no claim carries a label (T/F/N): the LLM's scores decide alone")
    if getattr(args, "no_llm", False) or getattr(args, "llm", None) is None:
        print(
            "label lean: not measured (the verifier decides; for --decision llm give --llm here, or run "
            "carag calibrate-verdicts later)"
        )
        return
    from llama_index_carag.cli.calibrate_verdicts import measure_lean

    if not corpus.claim_nodes:
        return
    try:
        measure_lean(corpus, retriever, _llm(args), str(out), args.lean_claims, args.seed)
    except CLIError as exc:
        print(f"label lean: not measured ({exc})")


def _verifier_line(record: dict[str, Any]) -> str:
    """One line on the archive verifier: what was kept, the out-of-fold macro-F1 of each candidate, the cost."""
    found = record.get("candidates") or {}
    scores = ", ".join(
        f"{name} {c['macro_f1']:.3f}" for name, c in found.items() if isinstance(c, dict) and "macro_f1" in c
    )
    why = record.get("why", f"out-of-fold macro-F1 {scores}" if scores else "")
    return (
        f"verifier: {record['choice']} kept ({record['claims']} labelled claims with evidence; {why}); "
        f"{record['seconds']:.0f} s"
    )
