"""Matplotlib drawing of the SOI graph: shape by kind, fill by stance, the SOI's members outlined, wrapped labels.

Every item is labelled with its text (wrapped with :mod:`textwrap`, ``#rank`` first when it was
retrieved), on the outer ring at the item's angle, facing away from the claim, so labels fan
outwards; the claim-edge midpoints carry the cosine similarities.  Framing: markers and texts have a size in
points, so a drawn thing is an anchor in data coordinates plus a reach in pixels (:class:`Extent`), and
:func:`largest_scale` finds the largest scale at which all of them fit the axes.  :func:`draw_soi` returns what it drew as
:class:`~llama_index_carag.visualize.soi_drawing.Extent` objects, so the caller can frame them exactly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.visualize.graph_drawing import _draw_mpl_edges
from llama_index_carag.visualize.soi_nodes import Positions
from llama_index_carag.visualize.styles import _KIND_ORDER, KIND_STYLES, MEMBER_EDGE, STANCE_STYLES
from llama_index_carag.visualize.text import _mpl_wrapped

if TYPE_CHECKING:  # pragma: no cover - typing only
    import matplotlib.axes
    import matplotlib.figure
    import matplotlib.legend
    import matplotlib.text
    import networkx
    from matplotlib.backend_bases import RendererBase

logger = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class Extent:
    """A drawn thing: its anchor ``(x, y)`` in data units and its reach around it in pixels.

    ``left`` and ``bottom`` are ``≤ 0`` for a thing that covers its anchor, ``right`` and ``top`` ``≥ 0``.
    """

    x: float
    y: float
    left: float
    right: float
    bottom: float
    top: float


def marker_extent(x: float, y: float, radius_px: float) -> Extent:
    """A marker of ``radius_px`` pixels centred on ``(x, y)``."""
    return Extent(x, y, -radius_px, radius_px, -radius_px, radius_px)


def text_extent(
    ax: matplotlib.axes.Axes, text: matplotlib.text.Text, anchor: tuple[float, float], renderer: RendererBase
) -> Extent:
    """The pixels ``text`` covers around its data ``anchor`` (its offset from the anchor must be in points)."""
    box = text.get_window_extent(renderer)
    ax_px, ay_px = ax.transData.transform(anchor)
    return Extent(anchor[0], anchor[1], box.x0 - ax_px, box.x1 - ax_px, box.y0 - ay_px, box.y1 - ay_px)


def largest_scale(coords: np.ndarray, low: np.ndarray, high: np.ndarray, room: float) -> float:
    """The largest ``s ≥ 0`` with ``max(coords·s + high) − min(coords·s + low) ≤ room``.

    Every pair ``(i, j)`` gives ``(c_i − c_j)·s + high_i − low_j ≤ room``: pairs with a positive slope
    bound ``s`` from above, pairs with a negative one from below.  ``math.inf`` when nothing bounds it
    from above (one anchor coordinate); ``0.0`` when no scale fits (a label wider than the room).
    """
    slope = coords[:, None] - coords[None, :]
    offset = high[:, None] - low[None, :]
    if (offset[slope == 0] > room).any():
        return 0.0
    rising, falling = slope > 0, slope < 0
    upper = float(((room - offset[rising]) / slope[rising]).min()) if rising.any() else math.inf
    lower = float(((room - offset[falling]) / slope[falling]).max()) if falling.any() else 0.0
    return upper if upper >= max(lower, 0.0) else 0.0


def _columns(extents: Sequence[Extent]) -> dict[str, np.ndarray]:
    return {name: np.array([getattr(e, name) for e in extents], dtype=float) for name in Extent.__dataclass_fields__}


def content_size(extents: Sequence[Extent], scale: float, margin_px: float) -> tuple[float, float]:
    """Width and height in pixels that the ``extents`` cover at ``scale``, plus ``margin_px`` on every side."""
    c = _columns(extents)
    width = (c["x"] * scale + c["right"]).max() - (c["x"] * scale + c["left"]).min()
    height = (c["y"] * scale + c["top"]).max() - (c["y"] * scale + c["bottom"]).min()
    return float(width) + 2 * margin_px, float(height) + 2 * margin_px


def fit_axes(
    ax: matplotlib.axes.Axes, extents: Sequence[Extent], *, margin_px: float, max_scale: float = math.inf
) -> float:
    """Set ``ax``'s limits so that every extent lies ``margin_px`` inside the axes, at the largest common scale.

    The scale is the same on both axes (capped at ``max_scale`` pixels per data unit); the drawing is
    centred in the slack the tighter direction leaves.  When nothing fits (labels larger than the
    axes), a warning is logged and the drawing is shown at a small scale, centred.

    Returns:
        the scale used, in pixels per data unit.
    """
    box = ax.get_window_extent()
    c = _columns(extents)
    scale = min(
        largest_scale(c["x"], c["left"], c["right"], box.width - 2 * margin_px),
        largest_scale(c["y"], c["bottom"], c["top"], box.height - 2 * margin_px),
        max_scale,
    )
    if not math.isfinite(scale):
        scale = 1.0  # one anchor only: any scale shows it; its limits are set from its reach below
    if scale <= 0:
        logger.warning("The labels do not fit in a %.0f x %.0f px drawing; some are cut.", box.width, box.height)
        spread = max(float(np.ptp(c["x"])), float(np.ptp(c["y"])), 1e-9)
        scale = 0.25 * min(box.width, box.height) / spread
    ax.set_aspect("auto")
    for lim, (pos, lo, hi, room) in (
        (ax.set_xlim, (c["x"], c["left"], c["right"], box.width)),
        (ax.set_ylim, (c["y"], c["bottom"], c["top"], box.height)),
    ):
        low_px, high_px = float((pos * scale + lo).min()), float((pos * scale + hi).max())
        start = low_px - (room - (high_px - low_px)) / 2
        lim(start / scale, (start + room) / scale)
    return scale
