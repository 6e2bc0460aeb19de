"""``carag eval``: the retrieval benchmark on new claims (:mod:`llama_index_carag.evaluation.benchmark`).

``--protocol`` runs it on a CSV in FactVer's layout (``--data``; the demo corpus by default), ``--beir DIR``
on a BEIR folder.  The papers' comparison, the sweeps, ``--explain`` and the verdict benchmarks are
research code beside the package: ``python -m research.eval`` in a checkout of the repository.
"""

from __future__ import annotations

import argparse

from llama_index_carag.cli.common import CLIError

__all__ = ["add_eval_arguments", "run_eval_command"]


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of ``carag eval``."""
    p.add_argument(
        "--protocol",
        action="store_true",
        help="the new-claims benchmark on --data (FactVer layout): dense, BM25, hybrid RRF and the CARAG "
        "variants side by side (report half by default; --split tune for the tuning half)",
    )
    p.add_argument(
        "--beir",
        default=None,
        metavar="DIR",
        help="the same benchmark on a BEIR-format folder (e.g. ../shared/data/scifact): queries from "
        "--beir-split, corpus claims = the train split's queries",
    )
    p.add_argument("--data", default=None, help="CSV in FactVer's layout (default: the packaged demo corpus)")
    p.add_argument("--embed-model", default="minilm", help="minilm (default), mpnet, or a Hugging Face id/path")
    p.add_argument("--out", default="carag_eval", help="output folder for the .csv / .md tables")
    p.add_argument(
        "--split",
        choices=["report", "tune", "all"],
        default="report",
        help="query claims: the held-out report half (default) or the tuning half ('all' is refused: new claims only)",
    )
    p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N query claims")
    p.add_argument("--cache-dir", default=None, help="cache passage embeddings here (per model)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--beir-split", default="test", help="BEIR qrels split of the queries (default test)")
    p.add_argument(
        "--tune-half",
        type=int,
        choices=[0, 1],
        default=0,
        help="with --beir and --split tune: which half of the train queries are the queries",
    )


def run_eval_command(args: argparse.Namespace) -> int:
    if not (args.protocol or args.beir):
        raise CLIError(
            "give --protocol (on --data) or --beir DIR; the papers' comparison, sweeps, --explain and --verdicts "
            "are research code: python -m research.eval in a checkout of the repository"
        )
    from llama_index_carag.evaluation.benchmark import run_protocol_command

    return run_protocol_command(args)
