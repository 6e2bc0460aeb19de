"""Matplotlib drawing of the SOI graph: shape by kind, fill by stance, the SOI's members outlined, wrapped labels.

Every item is labelled with its text (wrapped with :mod:`textwrap`, ``#rank`` first when it was
retrieved), on the outer ring at the item's angle, facing away from the claim, so labels fan
outwards; the claim-edge midpoints carry the cosine similarities.  :func:`draw_soi` returns what it drew as
:class:`~llama_index_carag.visualize.framing.Extent` objects, so the caller can frame them exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from llama_index_carag.visualize.framing import Extent, marker_extent, text_extent
from llama_index_carag.visualize.graph_drawing import _draw_mpl_edges
from llama_index_carag.visualize.soi_nodes import Positions
from llama_index_carag.visualize.styles import _KIND_ORDER, KIND_STYLES, MEMBER_EDGE, STANCE_STYLES
from llama_index_carag.visualize.text import _mpl_wrapped

if TYPE_CHECKING:  # pragma: no cover - typing only
    import matplotlib.axes
    import matplotlib.figure
    import matplotlib.legend
    import networkx


#: Line width (points) of a member's outline and of a non-member's hollow ring.
_MEMBER_LINE, _HOLLOW_LINE = 1.2, 2.4


def label_shape(n_items: int) -> tuple[int, int]:
    """Characters per line and lines of an item's label: shorter as the graph fills up (a few items: most of
    a passage)."""
    if n_items <= 8:
        return 34, 6
    if n_items <= 12:
        return 30, 4
    if n_items <= 30:
        return 26, 3
    return 22, 2


def node_label(data: Mapping[str, Any], width: int, lines: int) -> str:
    """An item's label: ``#rank`` (when retrieved) and its text, wrapped."""
    prefix = f"#{data['rank']} " if data.get("rank") is not None else ""
    return _mpl_wrapped(prefix + str(data["text"]), width, lines)


def node_paint(data: Mapping[str, Any]) -> tuple[str, str, float]:
    """Face colour, edge colour and edge width of a node: members filled, non-members hollow."""
    if data["kind"] == "claim":
        return KIND_STYLES["claim"]["color"], "white", 0.8
    colour = STANCE_STYLES[data.get("stance")]["color"]
    if data.get("in_soi"):
        return colour, MEMBER_EDGE, _MEMBER_LINE
    return "white", colour, _HOLLOW_LINE


def draw_soi(ax: matplotlib.axes.Axes, graph: networkx.Graph, pos: Positions, *, fontsize: float = 8) -> list[Extent]:
    """Draw edges, nodes, labels (``fontsize`` points) and similarity labels of :func:`soi_graph` on ``ax``.

    Returns:
        the extents of the markers and texts drawn.
    """
    _draw_mpl_edges(ax, graph, pos, edge_labels=False, edge_scale=3.5)
    dpi = ax.figure.dpi
    extents = []
    for kind in _KIND_ORDER:
        nodes = [n for n, d in graph.nodes(data=True) if d["kind"] == kind]
        if not nodes:
            continue
        style = KIND_STYLES[kind]
        paint = [node_paint(graph.nodes[n]) for n in nodes]
        ax.scatter(
            [pos[n][0] for n in nodes],
            [pos[n][1] for n in nodes],
            s=style["mpl_size"],
            c=[p[0] for p in paint],
            edgecolors=[p[1] for p in paint],
            linewidths=[p[2] for p in paint],
            marker=style["mpl_marker"],
            zorder=4,
        )
        radius = (math.sqrt(style["mpl_size"]) / 2 + _HOLLOW_LINE) * dpi / 72
        extents += [marker_extent(*pos[n], radius) for n in nodes]
    texts = _draw_labels(ax, graph, pos, fontsize) + _draw_similarities(ax, graph, pos, fontsize - 1)
    renderer = ax.figure.canvas.get_renderer()  # type: ignore[attr-defined]  # the Agg canvas has one
    return extents + [text_extent(ax, text, anchor, renderer) for text, anchor in texts]


def _draw_labels(
    ax: matplotlib.axes.Axes, graph: networkx.Graph, pos: Positions, fontsize: float
) -> list[tuple[Any, Any]]:
    """Each item's wrapped label on the outer ring at the item's angle, facing away from the claim.

    Labels sit on one ring (radius 1, the least similar items' distance) so neighbours are
    apart by their angle alone; an item nearer the claim is joined to its label by a dotted
    continuation of its edge.
    """
    claim_node = graph.graph["claim_node"]
    width, lines = label_shape(graph.number_of_nodes() - 1)
    drawn = []
    for node, data in graph.nodes(data=True):
        if node == claim_node:
            continue
        x, y = pos[node]
        angle = math.atan2(y, x)
        cos, sin = math.cos(angle), math.sin(angle)
        anchor = (max(math.hypot(x, y), 1.0) * cos, max(math.hypot(x, y), 1.0) * sin)
        if math.dist(anchor, (x, y)) > 1e-9:
            ax.plot([x, anchor[0]], [y, anchor[1]], ls=":", lw=0.8, color="#B0B0B0", zorder=1)
        ha = "left" if cos > 0.3 else "right" if cos < -0.3 else "center"
        va = "bottom" if sin > 0.3 else "top" if sin < -0.3 else "center"
        reach = math.sqrt(KIND_STYLES[data["kind"]]["mpl_size"]) / 2 + 4
        text = ax.annotate(
            node_label(data, width, lines),
            anchor,
            xytext=(reach * cos, reach * sin),
            textcoords="offset points",
            ha=ha,
            va=va,
            multialignment="left" if ha == "left" else "right" if ha == "right" else "center",
            fontsize=fontsize,
            color="#222222",
            zorder=5,
        )
        drawn.append((text, anchor))
    return drawn


def _draw_similarities(
    ax: matplotlib.axes.Axes, graph: networkx.Graph, pos: Positions, fontsize: float
) -> list[tuple[Any, Any]]:
    """The cosine similarity of each claim edge, at its midpoint."""
    drawn = []
    for u, v, d in graph.edges(data=True):
        if d.get("relation") != "similarity":
            continue
        mid = ((pos[u][0] + pos[v][0]) / 2, (pos[u][1] + pos[v][1]) / 2)
        text = ax.text(
            *mid,
            d["label"],
            fontsize=fontsize,
            ha="center",
            va="center",
            color="#333333",
            zorder=3,
            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85},
        )
        drawn.append((text, mid))
    return drawn


def soi_legends(fig: matplotlib.figure.Figure, graph: networkx.Graph) -> list[matplotlib.legend.Legend]:
    """Two legends on ``fig``: the stances (colours) present, and the node kinds (shapes) present."""
    from matplotlib.lines import Line2D

    data = [d for _, d in graph.nodes(data=True)]
    stances = [s for s in STANCE_STYLES if any(d["kind"] != "claim" and d.get("stance") == s for d in data)]
    colour_handles = [
        Line2D([], [], ls="", marker="o", ms=9, mfc=STANCE_STYLES[s]["color"], mec=MEMBER_EDGE, mew=_MEMBER_LINE)
        for s in stances
    ]
    kinds = [k for k in _KIND_ORDER if any(d["kind"] == k for d in data)]
    shape_handles = []
    for kind in kinds:
        hollow = kind == "retrieved_evidence"
        face = KIND_STYLES["claim"]["color"] if kind == "claim" else "white" if hollow else "#D9D9D9"
        edge = KIND_STYLES[kind]["color"] if hollow else MEMBER_EDGE
        marker = KIND_STYLES[kind]["mpl_marker"]
        shape_handles.append(Line2D([], [], ls="", marker=marker, ms=10, mfc=face, mec=edge, mew=1.6 if hollow else 1))
    shape_labels = [KIND_STYLES[k]["label"] for k in kinds]
    out = []
    for handles, labels, title in (
        (colour_handles, [STANCE_STYLES[s]["label"] for s in stances], "Stance (colour)"),
        (shape_handles, shape_labels, "SOI component (shape)"),
    ):
        if handles:
            legend = fig.legend(handles, labels, loc="upper left", title=title, fontsize=9, title_fontsize=9.5)
            legend.set_alignment("left")
            out.append(legend)
    return out
