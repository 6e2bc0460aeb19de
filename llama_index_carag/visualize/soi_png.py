"""The SOI graph's PNG page: a title block, the framed graph and a legend column, sized in pixels from what they hold.

The graph is drawn once; its markers and labels are measured
(:class:`~llama_index_carag.visualize.soi_drawing.Extent`), then the page is sized: a dimension the caller
fixed is kept, one left free is what the content needs at a readable scale (the graph grows with its
number of nodes).  Finally the axes are framed on the extents, so nothing is cut and the graph fills
its part of the page.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from llama_index_carag.visualize.output import _set_pixel_size
from llama_index_carag.visualize.soi_drawing import Extent, content_size, draw_soi, fit_axes, largest_scale, soi_legends
from llama_index_carag.visualize.soi_nodes import Positions, slot_count
from llama_index_carag.visualize.text import _mpl_title

if TYPE_CHECKING:  # pragma: no cover - typing only
    import matplotlib.axes
    import matplotlib.figure
    import networkx

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
