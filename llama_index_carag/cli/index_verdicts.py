"""The verdict half of ``carag index --calibrate``: the archive decision and the LLM's label lean.

Run after the index is built and saved: the archive decision is fitted on the corpus claims that carry a
verdict label (each retrieved as a new claim would be; no LLM), then the LLM's label lean is measured on a
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

    labelled = labelled_claims(corpus.claim_nodes)
    if labelled:
        t0 = time.perf_counter()
        decision = fit_archive_decision(retriever, corpus.claim_nodes, show_progress=True)
        save_archive_decision(out, decision, embed_model_name(retriever.embed_model))
        print(f"verdict decision: {decision.reason()}; {time.perf_counter() - t0:.0f} s")
    else:
        print("verdict decision: no claim carries a label (T/F/N): the LLM's scores decide alone")
    if getattr(args, "no_llm", False):
        print("label lean: not measured (--no-llm); carag calibrate-verdicts measures it later")
        return
    from llama_index_carag.cli.calibrate_verdicts import measure_lean

    if not corpus.claim_nodes:
        return
    try:
        measure_lean(corpus, retriever, _llm(args), str(out), args.lean_claims, args.seed)
    except CLIError as exc:
        print(f"label lean: not measured ({exc})")
