"""``carag graph`` and ``carag map``: the SOI / cluster graph of a claim, and thematic maps of explanations."""

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


def cmd_map(args: argparse.Namespace) -> int:
    import numpy as np

    from llama_index_carag.stores.vector_stores import get_node_embeddings
    from llama_index_carag.visualize import (
        load_explanations,
        project_2d,
        save_figure,
        thematic_map,
        thematic_map_3d,
        thematic_panels,
    )

    retriever = _load_retriever(args)
    expl = load_explanations(args.explanations, args.methods.split(",") if args.methods else None)
    index = retriever.index
    ids, vectors = get_node_embeddings(index)
    nodes = index.docstore.get_nodes(ids)
    themes = [n.metadata.get(retriever.theme_key) for n in nodes]
    keep = [i for i, t in enumerate(themes) if t in set(expl.themes)]
    if not keep:
        raise CLIError(f"no evidence in the index has one of the explanation themes {sorted(set(expl.themes))}")
    corpus, corpus_themes = vectors[keep], [themes[i] for i in keep]
    model = retriever.embed_model
    embedded = {m: np.asarray(model.get_text_embedding_batch(t, show_progress=True)) for m, t in expl.texts.items()}
    corpus_xy, xy = project_2d(corpus, embedded, method=args.method, random_state=args.seed)
    points = {m: (xy[m], expl.themes) for m in embedded}
    title = f"Explanations over theme densities ({args.method.upper()}, seed {args.seed})"
    written = [save_figure(thematic_map(corpus_xy, corpus_themes, points, title=title), args.out)]
    if args.panels:
        written.append(save_figure(thematic_panels(corpus_xy, corpus_themes, points, title=title), args.panels))
    if args.map3d:
        corpus_xyz, xyz = project_2d(corpus, embedded, method="pca", n_components=3)
        fig = thematic_map_3d(corpus_xyz, corpus_themes, {m: (xyz[m], expl.themes) for m in embedded}, title="3-D PCA")
        written.append(save_figure(fig, args.map3d))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
