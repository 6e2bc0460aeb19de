"""Drawing of node-link graphs: hovers and edges (both graphs), Plotly node traces and Matplotlib nodes by kind, and
the figures' canvases and files (Agg-backed Matplotlib figures, self-contained HTML written atomically)."""

from __future__ import annotations

import math
import os
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from llama_index_carag.core.atomic import atomic_write_text
from llama_index_carag.visualize.styles import _EDGE_GREY, _KIND_ORDER, KIND_STYLES
from llama_index_carag.visualize.text import _esc, _fmt_sim, _html, _wrap_html

if TYPE_CHECKING:  # pragma: no cover - typing only
    import matplotlib.axes
    import matplotlib.figure
    import networkx
    import plotly.graph_objects


def _edge_width(sim: float, *, base: float = 0.6, scale: float = 6.0) -> float:
    """Line width ∝ similarity (clipped to [0, 1]); ``base`` when unknown."""
    return base + scale * min(max(sim, 0.0), 1.0) if math.isfinite(sim) else base


def _hover(kind: str, item_id: Any, sim: float | None, text: Any, *, note: str = "", excerpt: Any = None) -> str:
    """Escaped hover label: kind, id, similarity (unless ``None``), ``note`` (ours, trusted), the ``excerpt`` a long
    passage's stance was read from (when given) and the wrapped text."""
    label = KIND_STYLES.get(kind, {"label": kind})["label"]
    head = f"<b>{_html(label)}</b>: {_esc(item_id, 60)}"
    if sim is not None:
        head += f"<br>cosine similarity to claim: {_fmt_sim(sim)}"
    if note:
        head += f"<br><i>{_html(note)}</i>"
    if excerpt:
        head += f"<br><br><i>stance read from:</i><br>{_wrap_html(excerpt)}"
    return f"{head}<br><br>{_wrap_html(text)}"


def _plotly_node_trace(
    graph: networkx.Graph,
    pos: Mapping[Hashable, tuple[float, float]],
    nodes: Sequence[Hashable],
    kind: str,
    *,
    show_ids: bool,
    sizes: Sequence[float] | None = None,
    line_widths: Sequence[float] | None = None,
) -> plotly.graph_objects.Scatter:
    """One legend entry: the ``nodes`` of one ``kind`` with escaped labels and hovers."""
    import plotly.graph_objects as go

    style = KIND_STYLES[kind]
    data = [graph.nodes[n] for n in nodes]
    labels = [_esc(d["item_id"], 18) for d in data] if show_ids else [_html(style["label"])] * len(data)
    return go.Scatter(
        x=[pos[n][0] for n in nodes],
        y=[pos[n][1] for n in nodes],
        mode="markers+text" if show_ids or kind == "claim" else "markers",
        name=style["label"],
        legendgroup=kind,
        text=labels,
        textposition="top center" if kind != "claim" else "bottom center",
        textfont={"size": 9 if kind != "claim" else 12, "color": "#333333"},
        hovertext=[
            _hover(
                d["kind"],
                d["item_id"],
                d["similarity"] if "similarity" in d and kind != "claim" else None,
                d["text"],
                note="highlighted (SOI)" if d.get("highlighted") else "",
            )
            for d in data
        ],
        hoverinfo="text",
        marker={
            "color": style["color"],
            "symbol": style["symbol"],
            "size": list(sizes) if sizes is not None else style["size"],
            "line": {
                "color": "#FFFFFF" if line_widths is None else "#000000",
                "width": list(line_widths) if line_widths is not None else 1,
            },
        },
    )


def _draw_mpl_graph(
    ax: matplotlib.axes.Axes,
    graph: networkx.Graph,
    pos: Mapping[Hashable, tuple[float, float]],
    *,
    highlight: Iterable[Hashable] = (),
    size_scale: float = 1.0,
    edge_scale: float = 3.5,
) -> None:
    """Draw edges (width ∝ weight) and nodes (one scatter per kind, labelled for the legend), coloured by kind."""
    _draw_mpl_edges(ax, graph, pos, edge_labels=False, edge_scale=edge_scale)
    highlighted = set(highlight)
    for kind in _KIND_ORDER:
        nodes = [n for n, d in graph.nodes(data=True) if d["kind"] == kind]
        if not nodes:
            continue
        style = KIND_STYLES[kind]
        sizes = [style["mpl_size"] * size_scale * (2.2 if n in highlighted else 1.0) for n in nodes]
        edge = ["black" if n in highlighted else "white" for n in nodes]
        ax.scatter(
            [pos[n][0] for n in nodes],
            [pos[n][1] for n in nodes],
            s=sizes,
            c=style["color"],
            marker=style["mpl_marker"],
            edgecolors=edge,
            linewidths=0.8,
            zorder=4,
            label=style["label"],
        )


def _draw_mpl_edges(
    ax: matplotlib.axes.Axes,
    graph: networkx.Graph,
    pos: Mapping[Hashable, tuple[float, float]],
    *,
    edge_labels: bool,
    edge_scale: float,
) -> None:
    """Edges (width ∝ weight; dotted for ``annotated_for``) and, optionally, the similarity edges' labels."""
    from matplotlib.collections import LineCollection

    segments, widths, styles = [], [], []
    for u, v, d in graph.edges(data=True):
        segments.append((pos[u], pos[v]))
        widths.append(_edge_width(d["weight"], base=0.4 * edge_scale / 3.5, scale=edge_scale))
        styles.append(":" if d.get("relation") == "annotated_for" else "-")
    if segments:
        ax.add_collection(
            LineCollection(segments, linewidths=widths, linestyles=styles, colors=_EDGE_GREY, alpha=0.7, zorder=1)
        )
    if not edge_labels:
        return
    for u, v, d in graph.edges(data=True):
        if d.get("relation") == "similarity":
            ax.text(
                (pos[u][0] + pos[v][0]) / 2,
                (pos[u][1] + pos[v][1]) / 2,
                d["label"],
                fontsize=7,
                ha="center",
                va="center",
                color="#333333",
                zorder=3,
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8},
            )


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
