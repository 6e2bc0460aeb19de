"""The cluster graph (Figure 6a/c/d): every member of one cluster, edges above a similarity threshold; HTML and PNG."""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.core.atomic import atomic_write
from llama_index_carag.visualize.graph_drawing import (
    _draw_mpl_graph,
    _pixel_figure,
    _plotly_node_trace,
    _write_plotly_html,
)
from llama_index_carag.visualize.styles import _EDGE_GREY, KIND_STYLES
from llama_index_carag.visualize.text import _esc, _fmt_sim, _html, _mpl_text

if TYPE_CHECKING:  # pragma: no cover - typing only
    import networkx
    import plotly.graph_objects


def cluster_graph(
    ids: Sequence[Any],
    texts: Sequence[Any],
    unit_vectors: np.ndarray,
    kinds: Sequence[str],
    *,
    threshold: float = 0.5,
    highlight: Iterable[Any] | None = None,
) -> networkx.Graph:
    """The members of one cluster, linked when their cosine similarity is ``> threshold``.

    Args:
        ids, texts: the ``m`` members' ids and texts.
        unit_vectors: their L2-normalised embeddings, shape ``(m, d)``.
        kinds: ``"claim"`` or ``"evidence"`` per member, length ``m``.
        threshold: edges join pairs with similarity strictly above it.
        highlight: ids to mark (node attribute ``highlighted=True``), e.g. the SOI.

    Builds the ``(m, m)`` similarity matrix: meant for one cluster (up to a few
    thousand members), not a whole corpus.

    Returns:
        a graph with nodes ``ids`` (attributes ``kind``, ``text``, ``item_id``,
        ``highlighted``) and edges with ``weight`` = similarity and ``label``.

    Raises:
        ValueError: lengths disagree, ``unit_vectors`` is not 2-D, a kind is unknown
            or an id repeats.
    """
    import networkx as nx

    unit = np.asarray(unit_vectors, dtype=np.float64)
    m = len(ids)
    if m == 0 and unit.size == 0:
        unit = unit.reshape(0, 0)
    if unit.ndim != 2 or unit.shape[0] != m or len(texts) != m or len(kinds) != m:
        raise ValueError(
            f"ids ({m}), texts ({len(texts)}), kinds ({len(kinds)}) and unit_vectors {unit.shape} "
            "must describe the same m members (unit_vectors of shape (m, d))."
        )
    bad = sorted({str(k) for k in kinds} - {"claim", "evidence"})
    if bad:
        raise ValueError(f"kinds must be 'claim' or 'evidence'; got {bad}.")
    keys = [str(i) for i in ids]
    if len(set(keys)) != m:
        raise ValueError("cluster_graph needs unique ids.")
    marked = {str(h) for h in (highlight or ())}
    graph = nx.Graph(threshold=float(threshold))
    for key, text, kind in zip(keys, texts, kinds):
        graph.add_node(key, kind=str(kind), text=str(text), item_id=key, highlighted=key in marked)
    if m > 1:
        sims = unit @ unit.T
        rows, cols = np.triu_indices(m, k=1)
        keep = sims[rows, cols] > threshold
        graph.add_edges_from(
            (keys[r], keys[c], {"weight": float(sims[r, c]), "label": _fmt_sim(float(sims[r, c]))})
            for r, c in zip(rows[keep], cols[keep])
        )
    return graph


def _cluster_layout(graph: networkx.Graph, unit: np.ndarray, seed: int) -> dict[Hashable, tuple[float, float]]:
    """Spring layout (fixed ``seed``) started from the members' 2-D PCA projection, within [-1, 1].

    ``unit`` has shape ``(m, d)`` in the graph's node order.
    """
    import networkx as nx

    nodes = list(graph.nodes)
    if not nodes:
        return {}
    centred = np.asarray(unit, dtype=np.float64) - np.asarray(unit, dtype=np.float64).mean(axis=0)
    if len(nodes) > 2 and centred.shape[1] >= 2 and np.abs(centred).max() > 0:
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        start = centred @ vt[:2].T
        start = start * np.sign(start[np.abs(start).argmax(axis=0), [0, 1]] + 1e-12)  # fixed sign per axis
        start /= max(float(np.abs(start).max()), 1e-12)
        init = {n: tuple(row) for n, row in zip(nodes, start)}
    else:
        init = None
    raw = nx.spring_layout(graph, pos=init, seed=seed, weight="weight", iterations=30)
    return {n: (float(p[0]), float(p[1])) for n, p in raw.items()}


def cluster_figure(
    ids: Sequence[Any],
    texts: Sequence[Any],
    unit_vectors: np.ndarray,
    kinds: Sequence[str],
    *,
    threshold: float = 0.5,
    highlight: Iterable[Any] | None = None,
    title: str | None = None,
    seed: int = 0,
) -> plotly.graph_objects.Figure:
    """Interactive Plotly picture of :func:`cluster_graph` (the papers' Figure 6a/c/d).

    Spring layout with a fixed ``seed``; one trace per kind; highlighted members
    drawn larger with a black outline; hover shows the escaped, wrapped text.
    """
    import plotly.graph_objects as go

    graph = cluster_graph(ids, texts, unit_vectors, kinds, threshold=threshold, highlight=highlight)
    pos = _cluster_layout(graph, unit_vectors, seed)
    fig = go.Figure()
    edges = _edge_trace(graph, pos)
    if edges is not None:
        fig.add_trace(edges)
    for kind in ("claim", "evidence"):
        nodes = [n for n, d in graph.nodes(data=True) if d["kind"] == kind]
        if nodes:
            fig.add_trace(_member_trace(graph, pos, nodes, kind))
    n_hl = sum(1 for _, d in graph.nodes(data=True) if d["highlighted"])
    heading = _esc(title) if title is not None else "Cluster graph"
    sub = f"{graph.number_of_nodes()} members · {graph.number_of_edges()} edges with similarity > {threshold:.2f}"
    if n_hl:
        sub += f" · {n_hl} highlighted (larger, outlined)"
    fig.update_layout(
        title={"text": f"{heading}<br><sup>{_html(sub)}</sup>", "x": 0.5, "xanchor": "center"},
        template="plotly_white",
        hovermode="closest",
        hoverlabel={"align": "left"},
        legend={"itemsizing": "constant"},
        margin={"l": 20, "r": 20, "t": 80, "b": 20},
        xaxis={"visible": False},
        yaxis={"visible": False, "scaleanchor": "x", "scaleratio": 1},
    )
    return fig


def _edge_trace(graph: Any, pos: Mapping[Any, tuple[float, float]]) -> plotly.graph_objects.Scatter | None:
    """All edges as one line trace (``None`` without edges)."""
    import plotly.graph_objects as go

    xs: list[float | None] = []
    ys: list[float | None] = []
    for u, v in graph.edges():
        xs.extend([pos[u][0], pos[v][0], None])
        ys.extend([pos[u][1], pos[v][1], None])
    if not xs:
        return None
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        hoverinfo="skip",
        showlegend=False,
        name="edges",
        line={"width": 0.8, "color": _EDGE_GREY},
        opacity=0.5,
    )


def _member_trace(
    graph: Any, pos: Mapping[Any, tuple[float, float]], nodes: Sequence[Any], kind: str
) -> plotly.graph_objects.Scatter:
    """The members of one kind, markers only; highlighted ones larger with a black outline."""
    base = 14 if kind == "claim" else KIND_STYLES["evidence"]["size"]
    hl = [graph.nodes[n]["highlighted"] for n in nodes]
    trace = _plotly_node_trace(
        graph,
        pos,
        nodes,
        kind,
        show_ids=False,
        sizes=[base * 1.8 if h else base for h in hl],
        line_widths=[2 if h else 0 for h in hl],
    )
    trace.update(mode="markers")
    return trace


def write_cluster_html(
    ids: Sequence[Any],
    texts: Sequence[Any],
    unit_vectors: np.ndarray,
    kinds: Sequence[str],
    path: str | os.PathLike[str],
    *,
    threshold: float = 0.5,
    highlight: Iterable[Any] | None = None,
    title: str | None = None,
    seed: int = 0,
) -> Path:
    """Write :func:`cluster_figure` as self-contained HTML; returns the resolved path."""
    fig = cluster_figure(
        ids, texts, unit_vectors, kinds, threshold=threshold, highlight=highlight, title=title, seed=seed
    )
    return _write_plotly_html(fig, path, div_id="carag-cluster-graph")


def write_cluster_png(
    ids: Sequence[Any],
    texts: Sequence[Any],
    unit_vectors: np.ndarray,
    kinds: Sequence[str],
    path: str | os.PathLike[str],
    *,
    threshold: float = 0.5,
    highlight: Iterable[Any] | None = None,
    title: str | None = None,
    seed: int = 0,
    width: int = 1200,
    height: int = 900,
    dpi: float = 100,
) -> Path:
    """Static Matplotlib PNG of :func:`cluster_graph`, exactly ``width`` × ``height`` pixels.

    Edge width ∝ similarity; highlighted members larger with a black outline; no
    text labels (clusters are large).  Returns the resolved path (written atomically).
    """
    graph = cluster_graph(ids, texts, unit_vectors, kinds, threshold=threshold, highlight=highlight)
    pos = _cluster_layout(graph, unit_vectors, seed)
    fig = _pixel_figure(width, height, dpi)
    ax = fig.add_axes((0.02, 0.02, 0.96, 0.88))
    fig.suptitle(_mpl_text(title if title is not None else "Cluster graph", 140), y=0.975, fontsize=13)
    fig.text(
        0.5,
        0.915,
        f"{graph.number_of_nodes()} members · {graph.number_of_edges()} edges with similarity > {threshold:.2f}",
        ha="center",
        fontsize=10,
        color="#444444",
    )
    _draw_mpl_graph(
        ax,
        graph,
        pos,
        size_scale=0.35,
        edge_scale=1.5,
        highlight=[n for n, d in graph.nodes(data=True) if d["highlighted"]],
    )
    ax.autoscale_view()
    ax.margins(0.08)
    ax.set_aspect("equal", adjustable="box")
    ax.set_axis_off()
    if graph.number_of_nodes():
        ax.legend(loc="upper left", fontsize=9, framealpha=0.9, markerscale=0.8)
    return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
