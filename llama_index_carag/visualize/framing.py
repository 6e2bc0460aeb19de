"""Axes limits computed from what is drawn: every marker and label inside the frame, the drawing as large as it fits.

Markers and texts have a size in points, not in data units, so a drawn thing is an anchor in data
coordinates plus a reach around it in pixels (:class:`Extent`).  At a scale of ``s`` pixels per data
unit (the same on both axes, so distances stay comparable) thing ``i`` covers
``[x_i·s + left_i, x_i·s + right_i]``.  :func:`largest_scale` finds the largest ``s`` at which all of
them fit in a given room, exactly (every pair of things is one linear constraint on ``s``);
:func:`fit_axes` sets the limits for it, :func:`content_size` gives the room a scale needs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    import matplotlib.axes
    import matplotlib.text
    from matplotlib.backend_bases import RendererBase

logger = logging.getLogger(__name__)


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
