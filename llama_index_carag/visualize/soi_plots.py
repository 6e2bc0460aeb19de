"""The SOI graph (Figure 6b) as pictures: an interactive Plotly figure, its HTML page and a static PNG.

Both pictures draw the same thing the same way: the claim (a black star) at the centre, each
node's shape its kind, its colour the passage's stance towards the claim (green supports, red
refutes, grey neither, pale blue not scored; :data:`~llama_index_carag.visualize.styles.STANCE_STYLES`),
the SOI's members filled with a dark outline and retrieved passages outside the SOI hollow.  The
graph and its layout are :mod:`~llama_index_carag.visualize.soi_nodes`' work.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index_carag.core.atomic import atomic_write
from llama_index_carag.retrieval.soi_reason import EmptySOIReason
from llama_index_carag.visualize.graph_drawing import _edge_width, _hover, _new_figure, _write_plotly_html
from llama_index_carag.visualize.soi_drawing import frame_soi_png
from llama_index_carag.visualize.soi_nodes import Positions, soi_graph, soi_layout
from llama_index_carag.visualize.styles import (
    _EDGE_GREY,
    _KIND_ORDER,
    KIND_STYLES,
    MEMBER_EDGE,
    STANCE_STYLES,
)
from llama_index_carag.visualize.text import _esc, _html, _shorten

if TYPE_CHECKING:  # pragma: no cover - typing only
    import matplotlib.figure
    import networkx
    import plotly.graph_objects

    from llama_index_carag.core.soi import SubsetOfInterest

logger = logging.getLogger(__name__)


def _soi_title_lines(graph: networkx.Graph) -> tuple[str, str]:
    """Raw (unescaped) title lines: the claim, and mode · theme · cluster · δ · size (· the evidence's stances)."""
    g = graph.graph
    mode = g.get("mode")
    method = {"supervised": "CARAG (supervised)", "unsupervised": "CARAG-u (unsupervised)"}.get(mode, str(mode))
    parts = [f"mode: {method}"]
    if g.get("theme") is not None:
        parts.append(f"theme: {_shorten(g['theme'], 40)}")
    parts.append(f"cluster: {g['cluster'] if g.get('cluster') is not None else 'n/a'}")
    low = g.get("threshold")
    widened = low is not None and low <= g["delta"]
    parts.append(
        f"δ = {g['delta']:.2f}" + (f" (the {g['min_size']} nearest kept, down to {low:.2f})" if widened else "")
    )
    size = f"SOI size: {g['soi_size']}"
    if g.get("cluster_size"):
        size += f" of {g['cluster_size']} in cluster"
    parts.append(size)
    if g.get("n_retrieved"):
        parts.append(_evidence_summary(graph))
    return f"Claim: “{_shorten(g['claim'], 110)}”", " · ".join(parts)


def _evidence_summary(graph: networkx.Graph) -> str:
    """``"6 retrieved (2 in the SOI): 2 support, 1 refutes"`` — the stance counts only when scored."""
    retrieved = [d for _, d in graph.nodes(data=True) if d.get("rank") is not None]
    members = sum(1 for d in retrieved if d["in_soi"])
    text = f"{len(retrieved)} retrieved ({members} in the SOI)"
    counts = {s: sum(1 for d in retrieved if d["stance"] == s) for s in ("SUPPORTED", "REFUTED", "NOT_ENOUGH_INFO")}
    if any(counts.values()):
        words = {"SUPPORTED": "support", "REFUTED": "refute", "NOT_ENOUGH_INFO": "neither"}
        text += ": " + ", ".join(f"{n} {words[s]}" for s, n in counts.items() if n)
    return text


def _plotly_label(data: Mapping[str, Any]) -> str:
    """A node's escaped on-graph label: ``#rank`` and the start of its text, on two short lines."""
    import textwrap

    prefix = f"#{data['rank']} " if data.get("rank") is not None else ""
    lines = textwrap.wrap(_shorten(prefix + str(data["text"]), 44), width=24) or [""]
    return "<br>".join(_html(line) for line in lines[:2])


def _text_position(xy: tuple[float, float]) -> str:
    """Plotly ``textposition`` on the side of a node away from the claim."""
    angle = math.atan2(xy[1], xy[0])
    cos, sin = math.cos(angle), math.sin(angle)
    vertical = "top" if sin > 0.3 else "bottom" if sin < -0.3 else "middle"
    horizontal = "right" if cos > 0.3 else "left" if cos < -0.3 else "center"
    return f"{vertical} {horizontal}"


def _node_note(data: Mapping[str, Any]) -> str:
    """The hover's note (our words only): SOI membership, rank and stance."""
    where = "in the SOI" if data["in_soi"] else "not in the SOI"
    if data.get("rank") is not None:
        where += f" · retrieved #{data['rank']}"
    stance = STANCE_STYLES[data.get("stance")]["label"]
    if data.get("stance_score") is not None:
        stance += f" (p = {data['stance_score']:.2f})"
    return f"{where} · {stance}"


def _stance_trace(graph: networkx.Graph, pos: Positions, stance: str | None, first: bool) -> Any:
    """The items of one stance: colour = stance, symbol = kind (open when not in the SOI)."""
    import plotly.graph_objects as go

    nodes = [n for k in _KIND_ORDER[1:] for n, d in graph.nodes(data=True) if d["kind"] == k and d["stance"] == stance]
    data = [graph.nodes[n] for n in nodes]
    colour = STANCE_STYLES[stance]["color"]
    return go.Scatter(
        x=[pos[n][0] for n in nodes],
        y=[pos[n][1] for n in nodes],
        mode="markers+text",
        name=STANCE_STYLES[stance]["label"],
        legendgroup="stance",
        legendgrouptitle={"text": "Stance (colour)"} if first else None,
        text=[_plotly_label(d) for d in data],
        textposition=[_text_position(pos[n]) for n in nodes],
        textfont={"size": 9, "color": "#333333"},
        cliponaxis=False,
        hovertext=[
            _hover(
                d["kind"], d["item_id"], d["similarity"], d["text"], note=_node_note(d), excerpt=d.get("stance_excerpt")
            )
            for d in data
        ],
        hoverinfo="text",
        marker={
            "color": colour,
            "symbol": [KIND_STYLES[d["kind"]]["symbol"] + ("" if d["in_soi"] else "-open") for d in data],
            "size": [KIND_STYLES[d["kind"]]["size"] for d in data],
            "line": {
                "color": [MEMBER_EDGE if d["in_soi"] else colour for d in data],
                "width": [1.5 if d["in_soi"] else 2.5 for d in data],
            },
        },
    )


def _shape_traces(graph: networkx.Graph, pos: Positions) -> list[Any]:
    """The claim, and one legend-only entry per item kind present (its shape, no stance colour)."""
    import plotly.graph_objects as go

    claim = graph.nodes[graph.graph["claim_node"]]
    present = [k for k in _KIND_ORDER[1:] if any(d["kind"] == k for _, d in graph.nodes(data=True))]
    traces = [
        go.Scatter(
            x=[0.0],
            y=[0.0],
            mode="markers",
            name=KIND_STYLES["claim"]["label"],
            legendgroup="shape",
            legendgrouptitle={"text": "SOI component (shape)"},
            hovertext=[_hover("claim", claim["item_id"], None, claim["text"])],
            hoverinfo="text",
            marker={"color": KIND_STYLES["claim"]["color"], "symbol": "star", "size": KIND_STYLES["claim"]["size"]},
        )
    ]
    for kind in present:
        hollow = kind == "retrieved_evidence"
        traces.append(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=KIND_STYLES[kind]["label"],
                legendgroup="shape",
                marker={
                    "color": KIND_STYLES[kind]["color"] if hollow else "#D9D9D9",
                    "symbol": KIND_STYLES[kind]["symbol"] + ("-open" if hollow else ""),
                    "size": 12,
                    "line": {"color": MEMBER_EDGE, "width": 2 if hollow else 1},
                },
            )
        )
    return traces


def _empty_caption(soi: SubsetOfInterest, empty_reason: str | None) -> str | None:
    """The caption of an empty SOI (``empty_reason``, else :class:`EmptySOIReason`'s text); ``None`` when it has items."""
    reason = EmptySOIReason.of(soi)
    if reason is None:
        return None
    return empty_reason or reason.text()


def soi_figure(
    soi: SubsetOfInterest,
    *,
    evidence: Iterable[Any] | None = None,
    title: str | None = None,
    empty_reason: str | None = None,
) -> plotly.graph_objects.Figure:
    """Interactive Plotly picture of :func:`soi_graph` (the papers' Figure 6b).

    Claim at the centre (see :func:`soi_layout`); one trace and legend entry per
    stance (its colour), legend entries for the node kinds (their shapes); SOI
    members filled with a dark outline, retrieved passages outside the SOI (from
    ``evidence``, see :func:`soi_graph`) hollow.  Edge widths ∝ similarity,
    similarity labels at the claim-edge midpoints, hover with the full passage
    (escaped, wrapped at ~80 characters), its SOI membership, rank and stance.
    The title shows the claim, mode, theme, cluster, δ and SOI size (and the
    evidence's stance counts); ``title`` (escaped too) replaces its first line.
    An empty SOI is annotated with why it is empty: ``empty_reason`` (e.g. ``carag check``'s
    ``soi.empty_reason`` text, which names the closest item), else
    :class:`~llama_index_carag.retrieval.soi_reason.EmptySOIReason`'s text from the SOI alone.
    """
    import plotly.graph_objects as go

    graph = soi_graph(soi, evidence=evidence)
    pos = soi_layout(graph)
    fig = go.Figure()
    _add_plotly_edges(fig, graph, pos)
    _add_plotly_similarities(fig, graph, pos)
    stances = [
        s for s in STANCE_STYLES if any(d["kind"] != "claim" and d["stance"] == s for _, d in graph.nodes(data=True))
    ]
    for index, stance in enumerate(stances):
        fig.add_trace(_stance_trace(graph, pos, stance, first=index == 0))
    for trace in _shape_traces(graph, pos):
        fig.add_trace(trace)

    first, second = _soi_title_lines(graph)
    heading = _esc(title) if title is not None else _esc(first)
    fig.update_layout(
        title={"text": f"{heading}<br><sup>{_esc(second)}</sup>", "x": 0.5, "xanchor": "center"},
        template="plotly_white",
        showlegend=True,
        legend={"itemsizing": "constant", "groupclick": "toggleitem", "tracegroupgap": 16},
        hovermode="closest",
        hoverlabel={"align": "left"},
        margin={"l": 110, "r": 110, "t": 90, "b": 50},
        xaxis={"visible": False, "range": [-1.25, 1.25]},
        yaxis={"visible": False, "range": [-1.25, 1.25], "scaleanchor": "x", "scaleratio": 1},
    )
    caption = _empty_caption(soi, empty_reason)
    if caption is not None:
        import textwrap

        lines = textwrap.wrap(caption, 110)
        text = "<br>".join(_html(line) for line in lines)
        fig.add_annotation(  # under the graph, off its nodes and labels
            x=0.5,
            y=0.0,
            xref="paper",
            yref="paper",
            yanchor="top",
            yshift=-8,
            text=text,
            showarrow=False,
            font={"size": 13, "color": "#B22222"},
        )
        fig.update_layout(margin={"b": 50 + 20 * len(lines)})
    logger.debug("SOI figure: %d nodes, %d edges", graph.number_of_nodes(), graph.number_of_edges())
    return fig


def _add_plotly_similarities(fig: plotly.graph_objects.Figure, graph: networkx.Graph, pos: Positions) -> None:
    """The similarity labels at the midpoints of the claim edges, as one text trace."""
    import plotly.graph_objects as go

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


def _add_plotly_edges(fig: plotly.graph_objects.Figure, graph: networkx.Graph, pos: Positions) -> None:
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


def write_soi_html(
    soi: SubsetOfInterest,
    path: str | os.PathLike[str],
    *,
    evidence: Iterable[Any] | None = None,
    title: str | None = None,
    empty_reason: str | None = None,
) -> Path:
    """Write :func:`soi_figure` (same arguments) as a self-contained HTML page (plotly.js inlined, works offline).

    Returns:
        the resolved path written (atomically).
    """
    fig = soi_figure(soi, evidence=evidence, title=title, empty_reason=empty_reason)
    return _write_plotly_html(fig, path, div_id="carag-soi-graph")


def soi_png_figure(
    soi: SubsetOfInterest,
    *,
    evidence: Iterable[Any] | None = None,
    width: int | None = None,
    height: int | None = None,
    dpi: float = 100,
    title: str | None = None,
    empty_reason: str | None = None,
) -> matplotlib.figure.Figure:
    """The Matplotlib figure of :func:`write_soi_png` (same arguments), on an Agg canvas.

    Raises:
        ValueError: ``width``, ``height`` or ``dpi`` not positive.
    """
    for name, value in (("width", width), ("height", height), ("dpi", dpi)):
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be positive; got {value}.")
    graph = soi_graph(soi, evidence=evidence)
    fig = _new_figure(12.0, 9.0, dpi)
    first, second = _soi_title_lines(graph)
    frame_soi_png(
        fig,
        graph,
        soi_layout(graph),
        heading=title if title is not None else first,
        subtitle=second,
        size=(width, height),
        note=_empty_caption(soi, empty_reason),
    )
    return fig


def write_soi_png(
    soi: SubsetOfInterest,
    path: str | os.PathLike[str],
    *,
    evidence: Iterable[Any] | None = None,
    width: int | None = None,
    height: int | None = None,
    dpi: float = 100,
    title: str | None = None,
    empty_reason: str | None = None,
) -> Path:
    """Static Matplotlib PNG of the SOI graph: the same nodes, shapes, colours and legends as :func:`soi_figure`.

    Every item is labelled with its text, wrapped (``#rank`` first when retrieved); the claim
    edges carry their similarity.  The axes are framed from the drawn extents, so no label is
    cut and the graph fills the frame.  ``width`` / ``height`` (pixels) fix the image's size;
    each one left ``None`` is computed from the content (the graph grows with its number of
    nodes).  An empty SOI is captioned, in red under the title, with why it is empty (``empty_reason`` as in
    :func:`soi_figure`).

    Returns:
        the resolved path written (atomically).

    Raises:
        ValueError: ``width``, ``height`` or ``dpi`` not positive.
    """
    fig = soi_png_figure(
        soi, evidence=evidence, width=width, height=height, dpi=dpi, title=title, empty_reason=empty_reason
    )
    return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
