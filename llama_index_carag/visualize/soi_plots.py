"""The SOI graph (Figure 6b): the claim at the centre, its Subset of Interest around it; graph, layout, HTML and PNG."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from llama_index_carag.core.atomic import atomic_write
from llama_index_carag.core.soi import SOI_LIST_KEYS
from llama_index_carag.visualize.graph_drawing import _draw_mpl_graph, _edge_width, _plotly_node_trace
from llama_index_carag.visualize.output import _pixel_figure, _write_plotly_html
from llama_index_carag.visualize.styles import _EDGE_GREY, _KIND_ORDER, EMPTY_SOI_MESSAGE, SOI_KIND_OF_KEY
from llama_index_carag.visualize.text import _esc, _fmt_sim, _html, _mpl_text, _mpl_title, _shorten

if TYPE_CHECKING:  # pragma: no cover - typing only
    import networkx
    import plotly.graph_objects

    from llama_index_carag.core.soi import SOIItem, SubsetOfInterest

logger = logging.getLogger(__name__)


def _unique_node(graph: networkx.Graph, wanted: str, kind: str) -> str:
    """``wanted`` if free in ``graph``, else a suffixed variant (logged)."""
    if wanted not in graph:
        return wanted
    candidate, n = f"{wanted} ({kind})", 2
    while candidate in graph:
        candidate, n = f"{wanted} ({kind} {n})", n + 1
    logger.warning("SOI node id %r is used twice; the %s item is named %r in the graph.", wanted, kind, candidate)
    return candidate


def soi_graph(soi: SubsetOfInterest) -> networkx.Graph:
    """The SOI as a star graph around its claim.

    Nodes (attributes ``kind``, ``text``, ``similarity``, ``item_id``):

    * the claim: id ``soi.claim_id`` or ``"query"``, ``kind="claim"``,
      ``similarity=1.0``;
    * one node per SOI item, keyed by its id, ``kind`` from the SOI key holding it
      (see :data:`SOI_KIND_OF_KEY`), ``claim_id`` as in the item.  An id used twice
      (or equal to the claim's) gets a suffixed key; ``item_id`` keeps the original.

    Edges:

    * claim – item, ``weight`` = the item's cosine similarity to the claim,
      ``label`` = ``f"{sim:.2f}"``, ``relation="similarity"``;
    * related claim – thematic evidence when the evidence's ``claim_id`` is a related
      claim of the SOI, ``relation="annotated_for"``.  Its ``weight`` is the
      *evidence's* similarity to the query claim (the SOI holds no
      claim-to-evidence similarity), so the edge reads "this passage, at this
      similarity to the query, backs that related claim".

    Graph attributes: ``claim_node``, ``claim``, ``mode``, ``delta``, ``cluster``,
    ``theme``, ``cluster_size``, ``soi_size``.
    """
    import networkx as nx

    graph = nx.Graph()
    claim_node = str(soi.claim_id) if soi.claim_id is not None else "query"
    graph.graph.update(
        claim_node=claim_node,
        claim=soi.claim,
        mode=soi.mode,
        delta=float(soi.delta),
        cluster=soi.cluster,
        theme=soi.theme,
        cluster_size=int(soi.cluster_size),
        soi_size=len(soi),
    )
    graph.add_node(
        claim_node, kind="claim", text=str(soi.claim), similarity=1.0, item_id=claim_node, claim_id=soi.claim_id
    )

    related_nodes: dict[str, str] = {}
    thematic: list[tuple[str, SOIItem]] = []
    for key in SOI_LIST_KEYS:
        kind = SOI_KIND_OF_KEY[key]
        for item in getattr(soi, key):
            node = _unique_node(graph, str(item.id), kind)
            sim = float(item.similarity)
            graph.add_node(
                node, kind=kind, text=str(item.text), similarity=sim, item_id=str(item.id), claim_id=item.claim_id
            )
            graph.add_edge(claim_node, node, weight=sim, label=_fmt_sim(sim), relation="similarity")
            if kind == "related_claim":
                related_nodes.setdefault(str(item.id), node)
            elif kind == "thematic_evidence":
                thematic.append((node, item))
    for node, item in thematic:
        owner = related_nodes.get(str(item.claim_id)) if item.claim_id is not None else None
        if owner is not None:
            sim = float(item.similarity)
            graph.add_edge(owner, node, weight=sim, label=_fmt_sim(sim), relation="annotated_for")
    return graph


def _item_groups(graph: networkx.Graph) -> list[list[Hashable]]:
    """Item nodes in angular layout order, as groups separated by a gap.

    Groups: the annotated evidence; then each related claim followed by its
    thematic evidence (consecutive related claims without evidence share one
    group); then thematic evidence of claims not in the SOI; then refined
    evidence.  Within a group nodes keep the SOI's order (by similarity).
    """
    claim_node = graph.graph["claim_node"]
    items = [n for n in graph.nodes if n != claim_node]
    by_kind = {kind: [n for n in items if graph.nodes[n]["kind"] == kind] for kind in _KIND_ORDER}
    evidence_of: dict[Hashable, list[Hashable]] = {n: [] for n in by_kind["related_claim"]}
    orphans: list[Hashable] = []
    for node in by_kind["thematic_evidence"]:
        owners = [m for m in graph.neighbors(node) if graph.edges[node, m].get("relation") == "annotated_for"]
        (evidence_of[owners[0]] if owners else orphans).append(node)
    groups: list[list[Hashable]] = [by_kind["annotated_evidence"]]
    for related in by_kind["related_claim"]:
        block = [related, *evidence_of[related]]
        previous = groups[-1]
        if len(block) == 1 and previous and all(graph.nodes[n]["kind"] == "related_claim" for n in previous):
            previous.append(related)
        else:
            groups.append(block)
    groups.extend([orphans, by_kind["refined_evidence"]])
    return [g for g in groups if g]


def soi_layout(graph: networkx.Graph) -> dict[Hashable, tuple[float, float]]:
    """Deterministic positions for :func:`soi_graph`'s nodes.

    The claim sits at ``(0, 0)``.  Items go round it clockwise from 12 o'clock in
    the groups of :func:`_item_groups` (annotated evidence; each related claim
    next to its thematic evidence; refined evidence), one empty slot between
    groups.  An item's distance to the centre grows as its similarity falls, from
    0.45 (most similar item of the SOI) to 1.0 (least similar, or unknown).

    Returns:
        node → ``(x, y)``.
    """
    claim_node = graph.graph["claim_node"]
    pos: dict[Hashable, tuple[float, float]] = {claim_node: (0.0, 0.0)}
    groups = _item_groups(graph)
    if not groups:
        return pos
    order = [n for g in groups for n in g]
    slots: list[int] = []
    slot = 0
    for index, group in enumerate(groups):
        slot += 1 if index else 0  # the gap before every group but the first
        for _ in group:
            slots.append(slot)
            slot += 1
    total = slot + (1 if len(groups) > 1 else 0)  # and the gap closing the circle
    sims = np.array([graph.nodes[n]["similarity"] for n in order], dtype=float)
    finite = sims[np.isfinite(sims)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    for node, s, sim in zip(order, slots, sims):
        if not math.isfinite(sim):
            radius = 1.0
        elif hi - lo < 1e-9:
            radius = 0.7
        else:
            radius = 0.45 + 0.55 * (hi - sim) / (hi - lo)
        angle = math.pi / 2 - 2 * math.pi * s / total
        pos[node] = (radius * math.cos(angle), radius * math.sin(angle))
    return pos


def _soi_title_lines(graph: networkx.Graph) -> tuple[str, str]:
    """Raw (unescaped) title lines: the claim, and mode · theme · cluster · δ · size."""
    g = graph.graph
    mode = g.get("mode")
    method = {"supervised": "CARAG (supervised)", "unsupervised": "CARAG-u (unsupervised)"}.get(mode, str(mode))
    parts = [f"mode: {method}"]
    if g.get("theme") is not None:
        parts.append(f"theme: {_shorten(g['theme'], 40)}")
    parts.append(f"cluster: {g['cluster'] if g.get('cluster') is not None else 'n/a'}")
    parts.append(f"δ = {g['delta']:.2f}")
    size = f"SOI size: {g['soi_size']}"
    if g.get("cluster_size"):
        size += f" of {g['cluster_size']} in cluster"
    parts.append(size)
    return f"Claim: “{_shorten(g['claim'], 110)}”", " · ".join(parts)


def soi_figure(soi: SubsetOfInterest, *, title: str | None = None) -> plotly.graph_objects.Figure:
    """Interactive Plotly picture of :func:`soi_graph` (the papers' Figure 6b).

    Claim at the centre (see :func:`soi_layout`), one trace and legend entry per
    node kind (distinct colour, size and symbol), edge widths ∝ similarity,
    similarity labels at the claim-edge midpoints, hover with the full passage
    (escaped, wrapped at ~80 characters).  The title shows the claim, mode, theme,
    cluster, δ and SOI size; ``title`` (escaped too) replaces its first line.  An
    empty SOI shows the claim alone with :data:`EMPTY_SOI_MESSAGE`.
    """
    import plotly.graph_objects as go

    graph = soi_graph(soi)
    pos = soi_layout(graph)
    claim_node = graph.graph["claim_node"]
    fig = go.Figure()

    _add_plotly_edges(fig, graph, pos)
    # similarity labels at the midpoints of the claim edges
    mids = [
        ((pos[u][0] + pos[v][0]) / 2, (pos[u][1] + pos[v][1]) / 2, d["label"])
        for u, v, d in graph.edges(data=True)
        if d["relation"] == "similarity"
    ]
    if mids:
        fig.add_trace(
            go.Scatter(
                x=[m[0] for m in mids],
                y=[m[1] for m in mids],
                text=[m[2] for m in mids],
                mode="text",
                textfont={"size": 10, "color": "#444444"},
                hoverinfo="skip",
                showlegend=False,
                name="similarity",
            )
        )
    for kind in _KIND_ORDER:
        nodes = [n for n, d in graph.nodes(data=True) if d["kind"] == kind]
        if nodes:
            fig.add_trace(_plotly_node_trace(graph, pos, nodes, kind, show_ids=kind != "claim"))

    first, second = _soi_title_lines(graph)
    heading = _esc(title) if title is not None else _esc(first)
    fig.update_layout(
        title={"text": f"{heading}<br><sup>{_esc(second)}</sup>", "x": 0.5, "xanchor": "center"},
        template="plotly_white",
        showlegend=True,
        legend={"title": {"text": "SOI component"}, "itemsizing": "constant"},
        hovermode="closest",
        hoverlabel={"align": "left"},
        margin={"l": 20, "r": 20, "t": 90, "b": 20},
        xaxis={"visible": False, "range": [-1.3, 1.3]},
        yaxis={"visible": False, "range": [-1.3, 1.3], "scaleanchor": "x", "scaleratio": 1},
    )
    if soi.is_empty:
        fig.add_annotation(
            x=0, y=-0.25, text=_html(EMPTY_SOI_MESSAGE), showarrow=False, font={"size": 14, "color": "#B22222"}
        )
    logger.debug("SOI figure of %r: %d nodes, %d edges", claim_node, graph.number_of_nodes(), graph.number_of_edges())
    return fig


def _add_plotly_edges(
    fig: plotly.graph_objects.Figure, graph: networkx.Graph, pos: Mapping[Hashable, tuple[float, float]]
) -> None:
    """Edges as line traces, one per (relation, rounded width) so widths can vary ∝ similarity."""
    import plotly.graph_objects as go

    groups: dict[tuple[str, float], tuple[list[float | None], list[float | None]]] = {}
    for u, v, d in graph.edges(data=True):
        width = round(_edge_width(d["weight"]) * 4) / 4
        xs, ys = groups.setdefault((d["relation"], width), ([], []))
        xs.extend([pos[u][0], pos[v][0], None])
        ys.extend([pos[u][1], pos[v][1], None])
    for (relation, width), (xs, ys) in sorted(groups.items()):
        dash = "dot" if relation == "annotated_for" else "solid"
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                hoverinfo="skip",
                showlegend=False,
                name=relation,
                line={
                    "width": width if relation == "similarity" else max(width / 2, 0.8),
                    "color": _EDGE_GREY,
                    "dash": dash,
                },
                opacity=0.75 if relation == "similarity" else 0.6,
            )
        )


def write_soi_html(soi: SubsetOfInterest, path: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """Write :func:`soi_figure` as a self-contained HTML page (plotly.js inlined, works offline).

    Returns:
        the resolved path written (atomically).
    """
    return _write_plotly_html(soi_figure(soi, title=title), path, div_id="carag-soi-graph")


def write_soi_png(
    soi: SubsetOfInterest,
    path: str | os.PathLike[str],
    *,
    width: int = 1200,
    height: int = 900,
    dpi: float = 100,
    title: str | None = None,
) -> Path:
    """Static Matplotlib PNG of the SOI graph, exactly ``width`` × ``height`` pixels.

    Same layout, kinds, colours, markers and legend as :func:`soi_figure`; claim
    edges labelled with their similarity; node labels are shortened passage texts.

    Returns:
        the resolved path written (atomically).
    """
    graph = soi_graph(soi)
    pos = soi_layout(graph)
    fig = _pixel_figure(width, height, dpi)
    first, second = _soi_title_lines(graph)
    heading = _mpl_title(title if title is not None else first, width, dpi, fontsize=13)
    fig.suptitle(heading, y=0.985, va="top", fontsize=13)
    heading_px = (heading.count("\n") + 1) * 13 * 1.3 * dpi / 72 + 8
    fig.text(0.5, 0.985 - heading_px / height, _mpl_text(second), ha="center", va="top", fontsize=10, color="#444444")
    ax = fig.add_axes((0.0, 0.0, 1.0, 0.86))
    _draw_mpl_graph(ax, graph, pos, label_chars=28, edge_labels=True)
    if soi.is_empty:
        ax.text(0, -0.3, EMPTY_SOI_MESSAGE, ha="center", va="center", fontsize=13, color="#B22222")
    ax.set_xlim(-1.25, 1.25)
    ax.set_ylim(-1.2, 1.2)
    ax.set_aspect("equal", adjustable="box")
    ax.set_axis_off()
    fig.legend(
        *ax.get_legend_handles_labels(),
        loc="upper left",
        bbox_to_anchor=(0.01, 0.86),
        fontsize=9,
        title="SOI component",
        framealpha=0.9,
        markerscale=0.6,
    )
    return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
