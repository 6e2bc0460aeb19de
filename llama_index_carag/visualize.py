"""Pictures of CARAG's context: the SOI graph, cluster graphs and thematic maps.

Three families of figures, after the CARAG and CARAG-u papers:

* **SOI graph** (Figure 6b): the claim at the centre and the items of its
  Subset of Interest around it, one colour, size and marker per SOI key, edges
  weighted by cosine similarity.  :func:`soi_graph` builds the
  :class:`networkx.Graph`, :func:`soi_figure` an interactive Plotly figure,
  :func:`write_soi_html` a self-contained HTML file (plotly.js inlined, opens
  offline) and :func:`write_soi_png` a static Matplotlib PNG.
* **Cluster graph** (Figure 6a/c/d): every member of one cluster, edges between
  pairs above a similarity threshold (:func:`cluster_graph`,
  :func:`cluster_figure`, :func:`write_cluster_html`, :func:`write_cluster_png`).
* **Thematic maps** (Figures 8-9 of CARAG, the 3-D view of CARAG-u): per-theme
  density contours (or convex hulls in 3-D) of already projected corpus
  embeddings, with each method's explanation points on top
  (:func:`thematic_map`, :func:`thematic_panels`, :func:`thematic_map_3d`,
  :func:`save_figure`).

Security: claims, passages and ids come from the open web.  Plotly renders a
subset of HTML in titles, texts and hover labels, so every user string is
passed through :func:`html.escape` *before* this module adds its own ``<br>``
/ ``<b>`` tags; Matplotlib labels have their ``$`` escaped so user text never
turns into mathtext.

Plotly, Matplotlib, NetworkX and SciPy are imported lazily inside the
functions: importing this module costs nothing.  Matplotlib figures are built
as :class:`matplotlib.figure.Figure` objects rendered by the Agg canvas, so no
GUI backend is ever selected.  All layouts are deterministic.
"""

from __future__ import annotations

import html
import logging
import math
import os
import tempfile
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np

from llama_index_carag.soi import SOI_LIST_KEYS

if TYPE_CHECKING:  # pragma: no cover - typing only
    import matplotlib.axes
    import matplotlib.figure
    import networkx
    import plotly.graph_objects

    from llama_index_carag.soi import SOIItem, SubsetOfInterest

logger = logging.getLogger(__name__)

__all__ = [
    "KIND_STYLES",
    "SOI_KIND_OF_KEY",
    "EMPTY_SOI_MESSAGE",
    "soi_graph",
    "soi_layout",
    "soi_figure",
    "write_soi_html",
    "write_soi_png",
    "cluster_graph",
    "cluster_figure",
    "write_cluster_html",
    "write_cluster_png",
    "thematic_map",
    "thematic_panels",
    "thematic_map_3d",
    "save_figure",
    "theme_colors",
]

# --------------------------------------------------------------------------- #
# Styles
# --------------------------------------------------------------------------- #

#: SOI key → node ``kind`` in :func:`soi_graph`.
SOI_KIND_OF_KEY: dict[str, str] = {
    "annotated_evidences": "annotated_evidence",
    "related_claims": "related_claim",
    "thematic_cluster_evidences": "thematic_evidence",
    "refined_cluster_evidences": "refined_evidence",
}

#: Per node kind: legend label, colour, Plotly marker size / symbol, Matplotlib
#: marker area (points²) / marker.  Colours are the Okabe-Ito palette.
KIND_STYLES: dict[str, dict[str, Any]] = {
    "claim": {"label": "claim", "color": "#000000", "size": 30, "symbol": "star", "mpl_size": 520, "mpl_marker": "*"},
    "annotated_evidence": {
        "label": "annotated evidence", "color": "#E69F00", "size": 20, "symbol": "diamond",
        "mpl_size": 200, "mpl_marker": "D",
    },
    "related_claim": {
        "label": "related claim", "color": "#56B4E9", "size": 17, "symbol": "square",
        "mpl_size": 170, "mpl_marker": "s",
    },
    "thematic_evidence": {
        "label": "thematic cluster evidence", "color": "#009E73", "size": 13, "symbol": "circle",
        "mpl_size": 110, "mpl_marker": "o",
    },
    "refined_evidence": {
        "label": "refined cluster evidence", "color": "#0072B2", "size": 15, "symbol": "triangle-up",
        "mpl_size": 140, "mpl_marker": "^",
    },
    "evidence": {"label": "evidence", "color": "#009E73", "size": 9, "symbol": "circle", "mpl_size": 110, "mpl_marker": "o"},
}

#: Order in which kinds are laid out and listed in legends.
_KIND_ORDER = ("claim", "annotated_evidence", "related_claim", "thematic_evidence", "refined_evidence", "evidence")

#: Annotation of an SOI figure whose SOI is empty.
EMPTY_SOI_MESSAGE = "empty SOI – retrieval falls back to the claim vector"

#: Qualitative palette for themes (Tableau 10), assigned to themes in sorted order.
_THEME_PALETTE = (
    "#4E79A7", "#F28E2B", "#59A14F", "#B07AA1", "#EDC948",
    "#76B7B2", "#FF9DA7", "#9C755F", "#BAB0AC", "#E15759",
)

#: Method name (normalised) → (label colour, Matplotlib marker) as in the papers' figures.
_METHOD_STYLES: dict[str, tuple[str, str]] = {
    "rag": ("#D62728", "o"),
    "carag": ("#2CA02C", "D"),
    "caragu": ("#1F77B4", "^"),
}
_EXTRA_METHOD_STYLES = (
    ("#9467BD", "s"), ("#FF7F0E", "P"), ("#8C564B", "X"), ("#E377C2", "v"),
    ("#7F7F7F", "h"), ("#BCBD22", "p"), ("#17BECF", "*"),
)

_HOVER_WRAP = 80
_HOVER_MAX_CHARS = 2000
_EDGE_GREY = "#8C8C8C"


# --------------------------------------------------------------------------- #
# Text helpers (escaping happens here and only here)
# --------------------------------------------------------------------------- #


def _safe(text: Any) -> str:
    """``str(text)`` without NULs and lone surrogates (fonts, JSON and files reject them)."""
    from llama_index_carag._validation import sanitize_text

    return sanitize_text(str(text))


def _shorten(text: Any, limit: int) -> str:
    """``str(text)`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(_safe(text).split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)].rstrip() + "…"


def _html(raw: str) -> str:
    """Escape ``raw`` for Plotly's pseudo-HTML.

    ``html.escape`` (``&``, ``<``, ``>``) and then numeric entities for ``"``, ``'``
    and ``$``: Plotly decodes numeric entities but not ``&quot;``, and a string
    that starts and ends with ``$`` would otherwise be handed to MathJax.
    """
    return html.escape(raw, quote=False).translate(_NUMERIC_ENTITIES)


_NUMERIC_ENTITIES = str.maketrans({'"': "&#34;", "'": "&#39;", "$": "&#36;"})


def _esc(text: Any, limit: int | None = None) -> str:
    """HTML-escaped ``text`` (shortened to ``limit`` raw characters first), safe for Plotly."""
    raw = _safe(text) if limit is None else _shorten(text, limit)
    return _html(raw)


def _wrap_html(text: Any, width: int = _HOVER_WRAP, max_chars: int = _HOVER_MAX_CHARS) -> str:
    """Escape ``text`` and wrap it to ``width`` characters per line joined by ``<br>``.

    The raw text is wrapped first and every line escaped on its own, so an
    entity such as ``&lt;`` is never cut and the only tags are our ``<br>``.
    """
    raw = _shorten(text, max_chars)
    lines = textwrap.wrap(raw, width=width, break_long_words=True, break_on_hyphens=False) or [""]
    return "<br>".join(_html(line) for line in lines)


def _mpl_text(text: Any, limit: int | None = None) -> str:
    """``text`` for a Matplotlib label: shortened, ``$`` escaped so mathtext never triggers."""
    raw = _safe(text) if limit is None else _shorten(text, limit)
    # every "$" becomes "\$": no unescaped dollar is left, so Matplotlib renders it literally
    return raw.replace("$", r"\$")


def _fmt_sim(value: float) -> str:
    """Similarity label: ``"0.87"``, or ``"n/a"`` when not finite."""
    return f"{value:.2f}" if math.isfinite(value) else "n/a"


# --------------------------------------------------------------------------- #
# Files
# --------------------------------------------------------------------------- #


def _atomic_write(path: str | os.PathLike[str], write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a temp file beside ``path``, then ``os.replace`` it onto ``path``.

    The parent folder is created when missing.  The file gets the mode of the file
    it replaces, else ``0o644`` (``mkstemp`` alone would leave ``0o600``).
    Returns the resolved path.
    """
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = (target.stat().st_mode & 0o777) if target.is_file() else 0o644
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    logger.debug("Wrote %s", target)
    return target.resolve()


def _write_plotly_html(fig: "plotly.graph_objects.Figure", path: str | os.PathLike[str], div_id: str) -> Path:
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
    return _atomic_write(path, lambda tmp: tmp.write_text(page, encoding="utf-8"))


def _new_figure(width_in: float, height_in: float, dpi: float, *, layout: str | None = None) -> "matplotlib.figure.Figure":
    """A Matplotlib Figure on an Agg canvas (no pyplot, no GUI backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=dpi, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: "matplotlib.figure.Figure", path: str | os.PathLike[str], *, dpi: float = 150) -> Path:
    """Save a Matplotlib figure as PNG, atomically.

    The image is ``figsize * dpi`` pixels (no tight cropping).

    Returns:
        the resolved path written.
    """
    return _atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))


# --------------------------------------------------------------------------- #
# SOI graph
# --------------------------------------------------------------------------- #


def _unique_node(graph: "networkx.Graph", wanted: str, kind: str) -> str:
    """``wanted`` if free in ``graph``, else a suffixed variant (logged)."""
    if wanted not in graph:
        return wanted
    candidate, n = f"{wanted} ({kind})", 2
    while candidate in graph:
        candidate, n = f"{wanted} ({kind} {n})", n + 1
    logger.warning("SOI node id %r is used twice; the %s item is named %r in the graph.", wanted, kind, candidate)
    return candidate


def soi_graph(soi: "SubsetOfInterest") -> "networkx.Graph":
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
        claim_node=claim_node, claim=soi.claim, mode=soi.mode, delta=float(soi.delta),
        cluster=soi.cluster, theme=soi.theme, cluster_size=int(soi.cluster_size), soi_size=len(soi),
    )
    graph.add_node(claim_node, kind="claim", text=str(soi.claim), similarity=1.0, item_id=claim_node, claim_id=soi.claim_id)

    related_nodes: dict[str, str] = {}
    thematic: list[tuple[str, "SOIItem"]] = []
    for key in SOI_LIST_KEYS:
        kind = SOI_KIND_OF_KEY[key]
        for item in getattr(soi, key):
            node = _unique_node(graph, str(item.id), kind)
            sim = float(item.similarity)
            graph.add_node(node, kind=kind, text=str(item.text), similarity=sim, item_id=str(item.id), claim_id=item.claim_id)
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


def _item_groups(graph: "networkx.Graph") -> list[list[Hashable]]:
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
        if len(block) == 1 and previous and all(
            graph.nodes[n]["kind"] == "related_claim" for n in previous
        ):
            previous.append(related)
        else:
            groups.append(block)
    groups.extend([orphans, by_kind["refined_evidence"]])
    return [g for g in groups if g]


def soi_layout(graph: "networkx.Graph") -> dict[Hashable, tuple[float, float]]:
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


def _edge_width(sim: float, *, base: float = 0.6, scale: float = 6.0) -> float:
    """Line width ∝ similarity (clipped to [0, 1]); ``base`` when unknown."""
    return base + scale * min(max(sim, 0.0), 1.0) if math.isfinite(sim) else base


def _soi_title_lines(graph: "networkx.Graph") -> tuple[str, str]:
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


def _hover(kind: str, item_id: Any, sim: float | None, text: Any, *, note: str = "") -> str:
    """Escaped hover label: kind, id, similarity (unless ``None``), ``note`` (ours, trusted) and the wrapped text."""
    label = KIND_STYLES.get(kind, {"label": kind})["label"]
    head = f"<b>{_html(label)}</b>: {_esc(item_id, 60)}"
    if sim is not None:
        head += f"<br>cosine similarity to claim: {_fmt_sim(sim)}"
    if note:
        head += f"<br><i>{_html(note)}</i>"
    return f"{head}<br><br>{_wrap_html(text)}"


def soi_figure(soi: "SubsetOfInterest", *, title: str | None = None) -> "plotly.graph_objects.Figure":
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
        fig.add_trace(go.Scatter(
            x=[m[0] for m in mids], y=[m[1] for m in mids], text=[m[2] for m in mids], mode="text",
            textfont={"size": 10, "color": "#444444"}, hoverinfo="skip", showlegend=False, name="similarity",
        ))
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
        fig.add_annotation(x=0, y=-0.25, text=_html(EMPTY_SOI_MESSAGE), showarrow=False,
                           font={"size": 14, "color": "#B22222"})
    logger.debug("SOI figure of %r: %d nodes, %d edges", claim_node, graph.number_of_nodes(), graph.number_of_edges())
    return fig


def _add_plotly_edges(fig: "plotly.graph_objects.Figure", graph: "networkx.Graph", pos: Mapping[Hashable, tuple[float, float]]) -> None:
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
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False, name=relation,
            line={"width": width if relation == "similarity" else max(width / 2, 0.8), "color": _EDGE_GREY, "dash": dash},
            opacity=0.75 if relation == "similarity" else 0.6,
        ))


def _plotly_node_trace(
    graph: "networkx.Graph", pos: Mapping[Hashable, tuple[float, float]], nodes: Sequence[Hashable], kind: str,
    *, show_ids: bool, sizes: Sequence[float] | None = None, line_widths: Sequence[float] | None = None,
) -> "plotly.graph_objects.Scatter":
    """One legend entry: the ``nodes`` of one ``kind`` with escaped labels and hovers."""
    import plotly.graph_objects as go

    style = KIND_STYLES[kind]
    data = [graph.nodes[n] for n in nodes]
    labels = [_esc(d["item_id"], 18) for d in data] if show_ids else [_html(style["label"])] * len(data)
    return go.Scatter(
        x=[pos[n][0] for n in nodes], y=[pos[n][1] for n in nodes],
        mode="markers+text" if show_ids or kind == "claim" else "markers",
        name=style["label"], legendgroup=kind,
        text=labels, textposition="top center" if kind != "claim" else "bottom center",
        textfont={"size": 9 if kind != "claim" else 12, "color": "#333333"},
        hovertext=[
            _hover(d["kind"], d["item_id"], d["similarity"] if "similarity" in d and kind != "claim" else None, d["text"],
                   note="highlighted (SOI)" if d.get("highlighted") else "")
            for d in data
        ],
        hoverinfo="text",
        marker={
            "color": style["color"], "symbol": style["symbol"],
            "size": list(sizes) if sizes is not None else style["size"],
            "line": {"color": "#FFFFFF" if line_widths is None else "#000000",
                     "width": list(line_widths) if line_widths is not None else 1},
        },
    )


def write_soi_html(soi: "SubsetOfInterest", path: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """Write :func:`soi_figure` as a self-contained HTML page (plotly.js inlined, works offline).

    Returns:
        the resolved path written (atomically).
    """
    return _write_plotly_html(soi_figure(soi, title=title), path, div_id="carag-soi-graph")


def _pixel_figure(width: int, height: int, dpi: float) -> "matplotlib.figure.Figure":
    """A figure that saves to exactly ``width`` × ``height`` pixels at ``dpi``."""
    if width <= 0 or height <= 0 or dpi <= 0:
        raise ValueError(f"width, height and dpi must be positive; got {width}, {height}, {dpi}.")
    # Agg truncates figsize*dpi to int: nudge up so e.g. 10.01 in * 100 dpi gives 1001, not 1000
    return _new_figure((width + 1e-3) / dpi, (height + 1e-3) / dpi, dpi)


def write_soi_png(
    soi: "SubsetOfInterest", path: str | os.PathLike[str], *, width: int = 1200, height: int = 900, dpi: float = 100,
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
    fig.legend(*ax.get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(0.01, 0.86), fontsize=9,
               title="SOI component", framealpha=0.9, markerscale=0.6)
    return _atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))


def _mpl_title(text: Any, width_px: float, dpi: float, *, fontsize: float, max_lines: int = 2) -> str:
    """``text`` wrapped to the figure width (about 0.55 em per character), at most ``max_lines`` lines."""
    per_line = max(20, int(0.95 * width_px / (0.55 * fontsize * dpi / 72)))
    lines = textwrap.wrap(_shorten(text, per_line * max_lines), width=per_line) or [""]
    return _mpl_text("\n".join(lines[:max_lines]))


def _draw_mpl_graph(
    ax: "matplotlib.axes.Axes", graph: "networkx.Graph", pos: Mapping[Hashable, tuple[float, float]], *,
    label_chars: int, edge_labels: bool, highlight: Iterable[Hashable] = (), node_labels: bool = True,
    size_scale: float = 1.0, edge_scale: float = 3.5,
) -> None:
    """Draw edges (width ∝ weight), nodes (one scatter per kind, labelled for the legend) and labels."""
    from matplotlib.collections import LineCollection

    segments, widths, styles = [], [], []
    for u, v, d in graph.edges(data=True):
        segments.append((pos[u], pos[v]))
        widths.append(_edge_width(d["weight"], base=0.4 * edge_scale / 3.5, scale=edge_scale))
        styles.append(":" if d.get("relation") == "annotated_for" else "-")
    if segments:
        ax.add_collection(LineCollection(segments, linewidths=widths, linestyles=styles, colors=_EDGE_GREY, alpha=0.7, zorder=1))
    if edge_labels:
        for u, v, d in graph.edges(data=True):
            if d.get("relation") == "similarity":
                ax.text((pos[u][0] + pos[v][0]) / 2, (pos[u][1] + pos[v][1]) / 2, d["label"], fontsize=7, ha="center",
                        va="center", color="#333333", zorder=3,
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
    highlighted = set(highlight)
    for kind in _KIND_ORDER:
        nodes = [n for n, d in graph.nodes(data=True) if d["kind"] == kind]
        if not nodes:
            continue
        style = KIND_STYLES[kind]
        sizes = [style["mpl_size"] * size_scale * (2.2 if n in highlighted else 1.0) for n in nodes]
        edge = ["black" if n in highlighted else "white" for n in nodes]
        ax.scatter([pos[n][0] for n in nodes], [pos[n][1] for n in nodes], s=sizes, c=style["color"],
                   marker=style["mpl_marker"], edgecolors=edge, linewidths=0.8, zorder=4, label=style["label"])
        if not node_labels:
            continue
        for n in nodes:
            data = graph.nodes[n]
            x, y = pos[n]
            if kind == "claim":
                ax.text(x, y - 0.11, _mpl_text(data["text"], 40), ha="center", va="top", fontsize=9, weight="bold",
                        zorder=5, bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "#999999", "alpha": 0.9})
            else:
                ax.text(x, y + 0.055, _mpl_text(data["text"], label_chars), ha="center", va="bottom", fontsize=7,
                        color="#222222", zorder=5)


# --------------------------------------------------------------------------- #
# Cluster graph
# --------------------------------------------------------------------------- #


def cluster_graph(
    ids: Sequence[Any], texts: Sequence[Any], unit_vectors: np.ndarray, kinds: Sequence[str], *,
    threshold: float = 0.5, highlight: Iterable[Any] | None = None,
) -> "networkx.Graph":
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
        raise ValueError(f"ids ({m}), texts ({len(texts)}), kinds ({len(kinds)}) and unit_vectors {unit.shape} "
                         "must describe the same m members (unit_vectors of shape (m, d)).")
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


def _cluster_layout(graph: "networkx.Graph", unit: np.ndarray, seed: int) -> dict[Hashable, tuple[float, float]]:
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
    ids: Sequence[Any], texts: Sequence[Any], unit_vectors: np.ndarray, kinds: Sequence[str], *,
    threshold: float = 0.5, highlight: Iterable[Any] | None = None, title: str | None = None, seed: int = 0,
) -> "plotly.graph_objects.Figure":
    """Interactive Plotly picture of :func:`cluster_graph` (the papers' Figure 6a/c/d).

    Spring layout with a fixed ``seed``; one trace per kind; highlighted members
    drawn larger with a black outline; hover shows the escaped, wrapped text.
    """
    import plotly.graph_objects as go

    graph = cluster_graph(ids, texts, unit_vectors, kinds, threshold=threshold, highlight=highlight)
    pos = _cluster_layout(graph, unit_vectors, seed)
    fig = go.Figure()
    xs: list[float | None] = []
    ys: list[float | None] = []
    for u, v in graph.edges():
        xs.extend([pos[u][0], pos[v][0], None])
        ys.extend([pos[u][1], pos[v][1], None])
    if xs:
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False, name="edges",
                                 line={"width": 0.8, "color": _EDGE_GREY}, opacity=0.5))
    for kind in ("claim", "evidence"):
        nodes = [n for n, d in graph.nodes(data=True) if d["kind"] == kind]
        if not nodes:
            continue
        base = 14 if kind == "claim" else KIND_STYLES["evidence"]["size"]
        hl = [graph.nodes[n]["highlighted"] for n in nodes]
        trace = _plotly_node_trace(
            graph, pos, nodes, kind, show_ids=False,
            sizes=[base * 1.8 if h else base for h in hl], line_widths=[2 if h else 0 for h in hl],
        )
        trace.update(mode="markers")
        fig.add_trace(trace)
    n_hl = sum(1 for _, d in graph.nodes(data=True) if d["highlighted"])
    heading = _esc(title) if title is not None else "Cluster graph"
    sub = f"{graph.number_of_nodes()} members · {graph.number_of_edges()} edges with similarity > {threshold:.2f}"
    if n_hl:
        sub += f" · {n_hl} highlighted (larger, outlined)"
    fig.update_layout(
        title={"text": f"{heading}<br><sup>{_html(sub)}</sup>", "x": 0.5, "xanchor": "center"},
        template="plotly_white", hovermode="closest", hoverlabel={"align": "left"},
        legend={"itemsizing": "constant"}, margin={"l": 20, "r": 20, "t": 80, "b": 20},
        xaxis={"visible": False}, yaxis={"visible": False, "scaleanchor": "x", "scaleratio": 1},
    )
    return fig


def write_cluster_html(
    ids: Sequence[Any], texts: Sequence[Any], unit_vectors: np.ndarray, kinds: Sequence[str],
    path: str | os.PathLike[str], *, threshold: float = 0.5, highlight: Iterable[Any] | None = None,
    title: str | None = None, seed: int = 0,
) -> Path:
    """Write :func:`cluster_figure` as self-contained HTML; returns the resolved path."""
    fig = cluster_figure(ids, texts, unit_vectors, kinds, threshold=threshold, highlight=highlight, title=title, seed=seed)
    return _write_plotly_html(fig, path, div_id="carag-cluster-graph")


def write_cluster_png(
    ids: Sequence[Any], texts: Sequence[Any], unit_vectors: np.ndarray, kinds: Sequence[str],
    path: str | os.PathLike[str], *, threshold: float = 0.5, highlight: Iterable[Any] | None = None,
    title: str | None = None, seed: int = 0, width: int = 1200, height: int = 900, dpi: float = 100,
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
    fig.text(0.5, 0.915, f"{graph.number_of_nodes()} members · {graph.number_of_edges()} edges with similarity > {threshold:.2f}",
             ha="center", fontsize=10, color="#444444")
    _draw_mpl_graph(ax, graph, pos, label_chars=0, edge_labels=False, node_labels=False, size_scale=0.35,
                    edge_scale=1.5,
                    highlight=[n for n, d in graph.nodes(data=True) if d["highlighted"]])
    ax.autoscale_view()
    ax.margins(0.08)
    ax.set_aspect("equal", adjustable="box")
    ax.set_axis_off()
    if graph.number_of_nodes():
        ax.legend(loc="upper left", fontsize=9, framealpha=0.9, markerscale=0.8)
    return _atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))


# --------------------------------------------------------------------------- #
# Thematic maps
# --------------------------------------------------------------------------- #

PointsByMethod = Mapping[str, tuple[Any, Sequence[Any]]]


def theme_colors(themes: Iterable[Any]) -> dict[str, str]:
    """Theme (as ``str``) → colour, assigned in sorted order from a fixed qualitative palette."""
    ordered = sorted({str(t) for t in themes})
    return {t: _THEME_PALETTE[i % len(_THEME_PALETTE)] for i, t in enumerate(ordered)}


def _method_styles(methods: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Method → (colour, marker): RAG red circles, CARAG green diamonds, CARAG-u blue triangles, then others."""
    out: dict[str, tuple[str, str]] = {}
    extra = 0
    for method in methods:
        norm = "".join(ch for ch in str(method).lower() if ch.isalnum())
        if norm in _METHOD_STYLES:
            out[method] = _METHOD_STYLES[norm]
        else:
            out[method] = _EXTRA_METHOD_STYLES[extra % len(_EXTRA_METHOD_STYLES)]
            extra += 1
    return out


def _check_points(xy: Any, themes: Sequence[Any], dims: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``xy`` as float array ``(n, dims)`` and ``themes`` as a str array ``(n,)``."""
    arr = np.asarray(xy, dtype=float)
    if arr.size == 0:
        arr = arr.reshape(0, dims)
    if arr.ndim != 2 or arr.shape[1] != dims:
        raise ValueError(f"{name} must have shape (n, {dims}); got {arr.shape}.")
    labels = np.array([str(t) for t in themes], dtype=object)
    if labels.shape[0] != arr.shape[0]:
        raise ValueError(f"{name} has {arr.shape[0]} rows but {labels.shape[0]} themes.")
    return arr, labels


def _checked_methods(points: PointsByMethod | None, dims: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {str(m): _check_points(xy, th, dims, f"points[{m!r}]") for m, (xy, th) in (points or {}).items()}


class _Grid:
    """A shared evaluation grid: ``xx``, ``yy`` of shape ``(res, res)`` and the bounds."""

    def __init__(self, arrays: Sequence[np.ndarray], res: int = 120, pad: float = 0.12) -> None:
        stacked = np.vstack([a for a in arrays if a.size]) if any(a.size for a in arrays) else np.zeros((1, 2))
        stacked = stacked[np.all(np.isfinite(stacked), axis=1)] if np.isfinite(stacked).any() else np.zeros((1, 2))
        lo, hi = stacked.min(axis=0), stacked.max(axis=0)
        span = np.where(hi - lo > 1e-9, hi - lo, 1.0)
        self.lo, self.hi = lo - pad * span, hi + pad * span
        self.xx, self.yy = np.meshgrid(np.linspace(self.lo[0], self.hi[0], res), np.linspace(self.lo[1], self.hi[1], res))


def _theme_densities(xy: np.ndarray, themes: np.ndarray, grid: _Grid) -> dict[str, np.ndarray]:
    """Theme → Gaussian KDE density on ``grid`` (shape ``(res, res)``).

    Themes with fewer than 3 distinct finite points, or a singular covariance
    (e.g. collinear points), are skipped and logged.
    """
    from scipy.stats import gaussian_kde

    out: dict[str, np.ndarray] = {}
    flat = np.vstack([grid.xx.ravel(), grid.yy.ravel()])
    for theme in sorted(set(themes.tolist())):
        pts = xy[themes == theme]
        pts = pts[np.all(np.isfinite(pts), axis=1)]
        if len(np.unique(pts, axis=0)) < 3:
            logger.info("Theme %r has fewer than 3 distinct points: no density contour.", theme)
            continue
        try:
            density = gaussian_kde(pts.T)(flat).reshape(grid.xx.shape)
        except (np.linalg.LinAlgError, ValueError) as exc:
            logger.info("No density contour for theme %r (%s).", theme, exc)
            continue
        if np.isfinite(density).all() and density.max() > 0:
            out[theme] = density
    return out


def _draw_densities(ax: "matplotlib.axes.Axes", densities: Mapping[str, np.ndarray], grid: _Grid,
                    colors: Mapping[str, str], levels: int) -> None:
    """Filled light contours plus line contours per theme, in sorted theme order."""
    from matplotlib.colors import to_rgba

    n = max(int(levels), 1)
    for theme in sorted(densities):
        z = densities[theme]
        top = float(z.max())
        steps = top * np.linspace(0.1, 0.9, n) if n > 1 else np.array([0.3 * top])
        color = colors[theme]
        fills = [to_rgba(color, a) for a in np.linspace(0.06, 0.3, len(steps))]
        ax.contourf(grid.xx, grid.yy, z, levels=[*steps, top * 1.0001], colors=fills, zorder=1)
        ax.contour(grid.xx, grid.yy, z, levels=steps, colors=[color], linewidths=0.9, alpha=0.85, zorder=2)


def _draw_corpus(ax: "matplotlib.axes.Axes", xy: np.ndarray, themes: np.ndarray, colors: Mapping[str, str], *,
                 faint: bool, without_density: Iterable[str] = ()) -> None:
    """The corpus as dots in its theme colours: faint ones (if ``faint``) for every theme,
    clearly visible ones for ``without_density`` themes (too small for a KDE)."""
    bare = set(without_density)
    for theme in sorted(set(themes.tolist())):
        pts = xy[themes == theme]
        if theme in bare:
            ax.scatter(*pts.T[:2], s=18, c=colors[theme], alpha=0.85, edgecolors="white", linewidths=0.4, zorder=3)
        elif faint:
            ax.scatter(*pts.T[:2], s=5, c=colors[theme], alpha=0.35, linewidths=0, zorder=1.5)


def _draw_methods(ax: "matplotlib.axes.Axes", methods: Mapping[str, tuple[np.ndarray, np.ndarray]],
                  styles: Mapping[str, tuple[str, str]], only_theme: str | None = None, *, size: float = 70) -> None:
    """Each method's points as black-edged markers on top (optionally one theme's only)."""
    for method, (pts, labels) in methods.items():
        if only_theme is not None:
            pts = pts[labels == only_theme]
        if len(pts):
            color, marker = styles[method]
            ax.scatter(*pts.T, s=size, c=color, marker=marker, edgecolors="black", linewidths=0.7, zorder=6, alpha=0.95)


def _legend_handles(themes: Sequence[str], colors: Mapping[str, str], methods: Sequence[str],
                    styles: Mapping[str, tuple[str, str]]) -> tuple[list[Any], list[Any]]:
    """Proxy artists: a patch per theme, a marker per method."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    theme_h = [Patch(facecolor=colors[t], edgecolor=colors[t], alpha=0.45, label=_mpl_text(t, 40)) for t in themes]
    method_h = [Line2D([], [], linestyle="none", marker=styles[m][1], markerfacecolor=styles[m][0],
                       markeredgecolor="black", markersize=8, label=_mpl_text(m, 30)) for m in methods]
    return theme_h, method_h


def _add_legends(fig: "matplotlib.figure.Figure", theme_h: list[Any], method_h: list[Any]) -> None:
    """Figure legends outside the plot on the right: themes above, methods below."""
    if theme_h:
        fig.legend(handles=theme_h, title="theme", loc="outside right upper", fontsize=8, title_fontsize=9)
    if method_h:
        fig.legend(handles=method_h, title="method", loc="outside right lower", fontsize=8, title_fontsize=9)


def thematic_map(
    corpus_xy: Any, corpus_themes: Sequence[Any], points: PointsByMethod | None, *, title: str | None = None,
    levels: int = 5, figsize: tuple[float, float] = (9.0, 6.5), show_corpus: bool = True,
) -> "matplotlib.figure.Figure":
    """Per-theme density contours of a 2-D projected corpus with the methods' points on top (Figure 8).

    Args:
        corpus_xy: projected corpus embeddings, shape ``(n, 2)``.
        corpus_themes: a theme per row, length ``n``.
        points: method name → (xy of shape ``(m, 2)``, ``m`` themes): each method's
            explanation points (RAG red circles, CARAG green diamonds, CARAG-u blue
            triangles; others get the next marker).
        levels: number of contour levels per theme.
        show_corpus: also draw the corpus as faint dots.

    Returns:
        a Matplotlib figure with one axes and figure legends for themes and methods.
    """
    xy, themes = _check_points(corpus_xy, corpus_themes, 2, "corpus_xy")
    methods = _checked_methods(points, 2)
    all_themes = sorted(set(themes.tolist()) | {t for _, labels in methods.values() for t in labels.tolist()})
    colors = theme_colors(all_themes)
    styles = _method_styles(methods)
    grid = _Grid([xy, *[p for p, _ in methods.values()]])
    densities = _theme_densities(xy, themes, grid)

    fig = _new_figure(*figsize, 100, layout="constrained")
    ax = fig.add_subplot()
    _draw_densities(ax, densities, grid, colors, levels)
    _draw_corpus(ax, xy, themes, colors, faint=show_corpus, without_density=set(themes.tolist()) - set(densities))
    _draw_methods(ax, methods, styles)
    _style_2d(ax, grid)
    ax.set_title(_mpl_text(title if title is not None else "Thematic map of the corpus with explanation points", 120))
    _add_legends(fig, *_legend_handles(all_themes, colors, list(methods), styles))
    return fig


def _style_2d(ax: "matplotlib.axes.Axes", grid: _Grid) -> None:
    ax.set_xlim(grid.lo[0], grid.hi[0])
    ax.set_ylim(grid.lo[1], grid.hi[1])
    ax.set_xlabel("component 1")
    ax.set_ylabel("component 2")
    ax.tick_params(labelsize=8)
    ax.grid(True, linewidth=0.3, alpha=0.5)


def thematic_panels(
    corpus_xy: Any, corpus_themes: Sequence[Any], points: PointsByMethod | None, *, title: str | None = None,
    levels: int = 5, ncols: int | None = None, panel_size: tuple[float, float] = (4.2, 3.6), show_corpus: bool = False,
) -> "matplotlib.figure.Figure":
    """One panel per theme (Figure 9): every theme's contours, only that theme's explanation points.

    Args: as :func:`thematic_map`; ``ncols`` defaults to ``min(3, #themes)``.

    Returns:
        a figure with exactly one axes per theme (sorted; themes of the corpus and of
        the points), shared limits, and figure legends.
    """
    xy, themes = _check_points(corpus_xy, corpus_themes, 2, "corpus_xy")
    methods = _checked_methods(points, 2)
    all_themes = sorted(set(themes.tolist()) | {t for _, labels in methods.values() for t in labels.tolist()})
    if not all_themes:
        raise ValueError("thematic_panels needs at least one theme.")
    colors = theme_colors(all_themes)
    styles = _method_styles(methods)
    grid = _Grid([xy, *[p for p, _ in methods.values()]])
    densities = _theme_densities(xy, themes, grid)

    cols = max(1, min(ncols or 3, len(all_themes)))
    rows = math.ceil(len(all_themes) / cols)
    fig = _new_figure(panel_size[0] * cols + 1.8, panel_size[1] * rows + 0.6, 100, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True)
    for index, ax in enumerate(axes.ravel()):
        if index >= len(all_themes):
            fig.delaxes(ax)
            continue
        theme = all_themes[index]
        _draw_densities(ax, densities, grid, colors, levels)
        _draw_corpus(ax, xy, themes, colors, faint=show_corpus, without_density=set(themes.tolist()) - set(densities))
        _draw_methods(ax, methods, styles, only_theme=theme, size=55)
        _style_2d(ax, grid)
        ax.set_title(_mpl_text(theme, 50), color=colors[theme], fontsize=10, weight="bold")
    fig.suptitle(_mpl_text(title if title is not None else "Explanation points per theme", 120))
    _add_legends(fig, *_legend_handles(all_themes, colors, list(methods), styles))
    return fig


def _hull_faces(pts: np.ndarray) -> np.ndarray | None:
    """Triangles ``(f, 3, 3)`` of the convex hull of ``pts`` ``(k, 3)``, or ``None`` if degenerate."""
    from scipy.spatial import ConvexHull

    pts = np.unique(pts[np.all(np.isfinite(pts), axis=1)], axis=0)
    if len(pts) < 4 or np.linalg.matrix_rank(pts - pts.mean(axis=0), tol=1e-9) < 3:
        return None
    try:
        hull = ConvexHull(pts)
    except Exception as exc:  # scipy.spatial.QhullError; its import path moved between versions
        logger.info("Convex hull failed (%s).", exc)
        return None
    return pts[hull.simplices]


def thematic_map_3d(
    corpus_xyz: Any, corpus_themes: Sequence[Any], points: PointsByMethod | None, *, title: str | None = None,
    figsize: tuple[float, float] = (9.0, 7.0), alpha: float = 0.12, show_corpus: bool = True,
    elev: float = 22.0, azim: float = -60.0,
) -> "matplotlib.figure.Figure":
    """3-D view (CARAG-u): a translucent convex hull per theme, the methods' points on top.

    Args:
        corpus_xyz: projected corpus embeddings, shape ``(n, 3)``.
        corpus_themes: a theme per row.
        points: method name → (xyz of shape ``(m, 3)``, ``m`` themes).
        alpha: hull face opacity.
        elev, azim: fixed camera angles (deterministic output).

    Themes with fewer than 4 affinely independent points get no hull (logged).

    Returns:
        a figure with one 3-D axes and figure legends.
    """
    from matplotlib.colors import to_rgba
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    xyz, themes = _check_points(corpus_xyz, corpus_themes, 3, "corpus_xyz")
    methods = _checked_methods(points, 3)
    all_themes = sorted(set(themes.tolist()) | {t for _, labels in methods.values() for t in labels.tolist()})
    colors = theme_colors(all_themes)
    styles = _method_styles(methods)

    fig = _new_figure(*figsize, 100, layout="constrained")
    ax = fig.add_subplot(projection="3d")
    for theme in sorted(set(themes.tolist())):
        pts = xyz[themes == theme]
        faces = _hull_faces(pts)
        if faces is None:
            logger.info("Theme %r has fewer than 4 affinely independent points: no convex hull.", theme)
        else:
            ax.add_collection3d(Poly3DCollection(faces, facecolors=to_rgba(colors[theme], alpha),
                                                 edgecolors=to_rgba(colors[theme], min(1.0, 2 * alpha)), linewidths=0.3))
        if faces is None and len(pts):  # no hull: show the theme's points clearly instead
            ax.scatter(*pts.T, s=16, c=colors[theme], alpha=0.85, depthshade=False)
        elif show_corpus and len(pts):
            ax.scatter(*pts.T, s=4, c=colors[theme], alpha=0.35, depthshade=False)
    for method, (pts, _) in methods.items():
        if len(pts):
            color, marker = styles[method]
            ax.scatter(*pts.T, s=60, c=color, marker=marker, edgecolors="black", linewidths=0.7, depthshade=False, alpha=1.0)
    every = [a for a in (xyz, *[p for p, _ in methods.values()]) if a.size]
    if every:
        stacked = np.vstack(every)
        stacked = stacked[np.all(np.isfinite(stacked), axis=1)]
        if len(stacked):
            lo, hi = stacked.min(axis=0), stacked.max(axis=0)
            pad = np.where(hi - lo > 1e-9, hi - lo, 1.0) * 0.05
            ax.set_xlim(lo[0] - pad[0], hi[0] + pad[0])
            ax.set_ylim(lo[1] - pad[1], hi[1] + pad[1])
            ax.set_zlim(lo[2] - pad[2], hi[2] + pad[2])
    ax.view_init(elev=elev, azim=azim)
    ax.set_xlabel("component 1", fontsize=8)
    ax.set_ylabel("component 2", fontsize=8)
    ax.set_zlabel("component 3", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(_mpl_text(title if title is not None else "Thematic 3-D map with explanation points", 120))
    _add_legends(fig, *_legend_handles(all_themes, colors, list(methods), styles))
    return fig
