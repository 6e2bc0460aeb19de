"""``carag graph``: the SOI graph of a claim (HTML, PNG) and its cluster's graph (PNG)."""

from __future__ import annotations

import argparse
from typing import Any

from llama_index_carag.cli.common import CLIError, _load_retriever, _stages


def _soi_and_evidence(retriever: Any, claim: str) -> tuple[Any, list[Any], str | None]:
    """The claim's SOI, its retrieved evidence (from the same SOI computation) and why the SOI is empty (or ``None``)."""
    from llama_index_carag.verdicts.check import ClaimChecker

    retrieved = ClaimChecker(retriever).retrieve(claim)
    reason = retrieved.empty_reason
    return retrieved.soi, retrieved.nodes, None if reason is None else reason.text()


def cmd_graph(args: argparse.Namespace) -> int:
    from llama_index_carag.core.validation import check_query_text
    from llama_index_carag.visualize import write_cluster_png, write_soi_html, write_soi_png

    if not (args.html or args.png or args.cluster_png):
        raise CLIError("give at least one of --html, --png, --cluster-png")
    check_query_text(args.claim, "claim")
    stages = _stages(args)
    retriever = _load_retriever(args, stages)
    with stages.stage("retrieving"):
        soi, evidence, reason = _soi_and_evidence(retriever, args.claim)
    written = []
    if args.html:
        written.append(write_soi_html(soi, args.html, evidence=evidence, empty_reason=reason))
    if args.png:
        written.append(write_soi_png(soi, args.png, evidence=evidence, empty_reason=reason))
    if args.cluster_png:
        members = retriever.context.members((soi.theme, soi.cluster))
        kinds = ["claim" if c else "evidence" for c in members.is_claim]
        texts = [members.texts[i] for i in range(len(members.ids))]
        written.append(
            write_cluster_png(
                list(members.ids),
                texts,
                members.unit,
                kinds,
                args.cluster_png,
                threshold=args.edge_threshold,
                highlight=set(soi.item_ids),
            )
        )
    print(f"SOI of {len(soi)} items (cluster {soi.cluster}); wrote " + ", ".join(str(p) for p in written))
    if reason is not None:
        print(reason)
    return 0
