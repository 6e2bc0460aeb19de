"""Figure canvases and files: Agg-backed Matplotlib figures and self-contained HTML writing."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from llama_index_carag.core.atomic import atomic_write_text

if TYPE_CHECKING:  # pragma: no cover - typing only
    import matplotlib.figure
    import plotly.graph_objects

logger = logging.getLogger(__name__)


def _write_plotly_html(fig: plotly.graph_objects.Figure, path: str | os.PathLike[str], div_id: str) -> Path:
    """Write ``fig`` as a full, self-contained HTML page (plotly.js inlined)."""
    import plotly.io as pio

    page = pio.to_html(
        fig,
        include_plotlyjs=True,
        include_mathjax=False,
        full_html=True,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True},
    )
    return atomic_write_text(path, page)


def _new_figure(
    width_in: float,
    height_in: float,
    dpi: float,
    *,
    layout: Literal["constrained", "compressed", "tight"] | None = None,
) -> matplotlib.figure.Figure:
    """A Matplotlib Figure on an Agg canvas (no pyplot, no GUI backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=dpi, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def _pixel_figure(width: int, height: int, dpi: float) -> matplotlib.figure.Figure:
    """A figure that saves to exactly ``width`` × ``height`` pixels at ``dpi``."""
    if width <= 0 or height <= 0 or dpi <= 0:
        raise ValueError(f"width, height and dpi must be positive; got {width}, {height}, {dpi}.")
    fig = _new_figure(width / dpi, height / dpi, dpi)
    _set_pixel_size(fig, width, height)
    return fig


def _set_pixel_size(fig: matplotlib.figure.Figure, width: int, height: int) -> None:
    """Resize ``fig`` so that it saves to exactly ``width`` × ``height`` pixels at its dpi."""
    # Agg truncates figsize*dpi to int: nudge up so e.g. 10.01 in * 100 dpi gives 1001, not 1000
    fig.set_size_inches((width + 1e-3) / fig.dpi, (height + 1e-3) / fig.dpi)
