"""The SOI graph as a Matplotlib figure and PNG: shape by kind, fill by stance, the SOI's members outlined, wrapped
labels, framed on what is drawn, on a page sized from what it holds.

Every item is labelled with its text (wrapped with :mod:`textwrap`, ``#rank`` first when it was
retrieved), on the outer ring at the item's angle, facing away from the claim, so labels fan
outwards; the claim-edge midpoints carry the cosine similarities.  Framing: markers and texts have a size in
points, so a drawn thing is an anchor in data coordinates plus a reach in pixels (:class:`Extent`), and
:func:`largest_scale` finds the largest scale at which all of them fit the axes.  The page
(:func:`frame_soi_png`) is a title block, the framed graph and a legend column: a dimension the caller fixed is
kept, one left free is what the content needs at a readable scale (the graph grows with its number of nodes).  :func:`draw_soi` returns what it drew as
:class:`~llama_index_carag.visualize.soi_drawing.Extent` objects, so the caller can frame them exactly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.visualize.graph_drawing import _draw_mpl_edges, _set_pixel_size
from llama_index_carag.visualize.soi_nodes import Positions, slot_count
from llama_index_carag.visualize.styles import _KIND_ORDER, KIND_STYLES, MEMBER_EDGE, STANCE_STYLES
from llama_index_carag.visualize.text import _mpl_title, _mpl_wrapped

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


#: Pixels: around the graph's content, between the page's blocks, the narrowest page drawn unasked.
_MARGIN, _PAD, _MIN_WIDTH = 14.0, 12.0, 900
_HEADING_PT, _SUBTITLE_PT = 13.0, 10.0
#: Label sizes (points) tried in turn on a fixed page, and the scale (px per data unit) that is enough.
_LABEL_POINTS, _MIN_SCALE = (8.0, 7.0, 6.0, 5.0), 60.0


def ring_px(n_slots: int) -> float:
    """Pixels per data unit (the label ring's radius) that keep the labels of ``n_slots`` angular slots apart.

    About 150 px of label width per slot round the ring, within [230, 900].
    """
    return min(max(230.0, 150.0 * n_slots / (2 * math.pi)), 900.0)


def _titles(heading: str, subtitle: str, note: str | None, width_px: float, dpi: float) -> tuple[list[str], float]:
    """Heading, subtitle and note (``None``: none) wrapped to ``width_px``, two lines each at most; block height (px)."""
    parts = [_mpl_title(heading, width_px, dpi, fontsize=_HEADING_PT)]
    parts += [_mpl_title(text, width_px, dpi, fontsize=_SUBTITLE_PT) for text in (subtitle, note) if text is not None]
    points = sum((p.count("\n") + 1) * (_HEADING_PT if i == 0 else _SUBTITLE_PT) for i, p in enumerate(parts))
    return parts, points * 1.3 * dpi / 72 + (len(parts) + 1) * _PAD


def _fitting_scale(extents: list[Extent], room: float, axis: str) -> float:
    """The largest scale at which the extents fit in ``room`` pixels along ``axis`` (``"x"`` or ``"y"``)."""
    low, high = ("left", "right") if axis == "x" else ("bottom", "top")
    coords, lows, highs = (np.array([getattr(e, k) for e in extents], dtype=float) for k in (axis, low, high))
    return largest_scale(coords, lows, highs, room - 2 * _MARGIN)


def _draw(ax: matplotlib.axes.Axes, graph: networkx.Graph, pos: Positions, fontsize: float) -> list[Extent]:
    """Draw the graph on a cleared ``ax``; return the extents of what was drawn."""
    ax.clear()
    ax.set_axis_off()
    ax.set_xlim(-1.3, 1.3)
    ax.set_ylim(-1.3, 1.3)
    return draw_soi(ax, graph, pos, fontsize=fontsize)


def _scale(
    extents: list[Extent], graph: networkx.Graph, size: tuple[int | None, int | None], room: tuple[float, float]
) -> float:
    """The drawing's scale: the ring scale for its slots, less where a fixed ``size`` (less ``room``) is tighter."""
    scale = ring_px(slot_count(graph))
    if size[0] is not None:
        scale = min(scale, _fitting_scale(extents, size[0] - room[0], "x"))
    if size[1] is not None:
        scale = min(scale, _fitting_scale(extents, size[1] - room[1], "y"))
    return scale


def frame_soi_png(
    fig: matplotlib.figure.Figure,
    graph: networkx.Graph,
    pos: Positions,
    *,
    heading: str,
    subtitle: str,
    size: tuple[int | None, int | None],
    note: str | None = None,
) -> None:
    """Draw the SOI graph on ``fig`` and size and lay out the page (``size``: fixed width/height or ``None``).

    ``heading``, ``subtitle`` and ``note`` are raw text (wrapped and escaped here); ``note`` is a red
    line under the subtitle.  On a fixed page too small for the labels at a readable scale, the labels get smaller.
    """
    dpi = fig.dpi
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    legends = soi_legends(fig, graph)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # the Agg canvas has one
    boxes = [legend.get_window_extent(renderer) for legend in legends]
    legend_w = max((b.width for b in boxes), default=0.0) + 2 * _PAD
    legend_h = sum(b.height for b in boxes) + _PAD * (len(boxes) + 1)
    width, height = size
    room = (legend_w, _titles(heading, subtitle, note, width or _MIN_WIDTH, dpi)[1])
    for fontsize in _LABEL_POINTS:
        extents = _draw(ax, graph, pos, fontsize)
        scale = _scale(extents, graph, size, room)
        if scale >= _MIN_SCALE or (width is None and height is None):
            break
    need_w, need_h = content_size(extents, max(scale, 0.0), _MARGIN)
    page_w = width or max(_MIN_WIDTH, math.ceil(need_w + legend_w))
    parts, title_h = _titles(heading, subtitle, note, page_w, dpi)
    page_h = height or math.ceil(title_h + max(need_h, legend_h))
    _set_pixel_size(fig, page_w, page_h)

    ax.set_position((0.0, 0.0, (page_w - legend_w) / page_w, (page_h - title_h) / page_h))
    top = page_h - _PAD
    for index, (text, colour) in enumerate(zip(parts, ("black", "#444444", "#B22222"))):
        points = _HEADING_PT if index == 0 else _SUBTITLE_PT
        fig.text(0.5, top / page_h, text, ha="center", va="top", fontsize=points, color=colour)
        top -= (text.count("\n") + 1) * points * 1.3 * dpi / 72 + _PAD
    y = page_h - title_h - _PAD
    for legend, box in zip(legends, boxes):
        legend.set_bbox_to_anchor(((page_w - legend_w + _PAD) / page_w, y / page_h))
        y -= box.height + _PAD
    fit_axes(ax, extents, margin_px=_MARGIN)
