"""Pictures of CARAG's context: the SOI graph and cluster graphs.

Two families of figures, after the CARAG and CARAG-u papers:

* **SOI graph** (Figure 6b): the claim at the centre and the items of its
  Subset of Interest around it, edges weighted by cosine similarity; a node's
  shape is its SOI key, its colour the passage's stance towards the claim
  (:data:`STANCE_STYLES`), and with the check's evidence the retrieved passages
  outside the SOI join the graph, drawn hollow.  :func:`soi_graph` builds the
  :class:`networkx.Graph`, :func:`soi_figure` an interactive Plotly figure,
  :func:`write_soi_html` a self-contained HTML file (plotly.js inlined, opens
  offline), :func:`soi_png_figure` / :func:`write_soi_png` a static Matplotlib
  figure / PNG whose labels are wrapped and framed so none is cut.
* **Cluster graph** (Figure 6a/c/d): every member of one cluster, edges between
  pairs above a similarity threshold (:func:`cluster_graph`,
  :func:`cluster_figure`, :func:`write_cluster_html`, :func:`write_cluster_png`).

The papers' thematic maps of explanations (Figures 8-9) are research code beside the package
(``python -m research.thematic_maps``).

Security: claims, passages and ids come from the open web.  Plotly renders a
subset of HTML in titles, texts and hover labels, so every user string is
passed through :func:`html.escape` *before* this package adds its own ``<br>``
/ ``<b>`` tags; Matplotlib labels have their ``$`` escaped so user text never
turns into mathtext.

Plotly, Matplotlib, NetworkX and SciPy are imported lazily inside the
functions: importing this package costs nothing.  Matplotlib figures are built
as :class:`matplotlib.figure.Figure` objects rendered by the Agg canvas, so no
GUI backend is ever selected.  All layouts are deterministic.

Modules (this package exports the names used through it; the rest are imported from their module):

* :mod:`~llama_index_carag.visualize.soi_nodes` — the SOI graph's nodes, edges and layout, and the check's evidence
  as the SOI graph reads it (rank, stance);
* :mod:`~llama_index_carag.retrieval.soi_reason` — why an SOI is empty, in words (the caption of an empty SOI);
* :mod:`~llama_index_carag.visualize.soi_plots` — the SOI graph's Plotly figure, HTML and PNG;
* :mod:`~llama_index_carag.visualize.soi_drawing` — Matplotlib drawing of the SOI graph: stance colours, labels,
  legends, axes limits computed from the drawn extents, the PNG's page sized from its content;
* :mod:`~llama_index_carag.visualize.cluster_plots` — the cluster graph, HTML and PNG;
* :mod:`~llama_index_carag.visualize.graph_drawing` — hovers, edges, node traces and Matplotlib nodes by kind,
  Agg figures and atomic HTML writing;
* :mod:`~llama_index_carag.visualize.styles` — node-kind and stance styles;
* :mod:`~llama_index_carag.visualize.text` — escaping and shortening of user text.
"""

from __future__ import annotations

from llama_index_carag.retrieval.soi_reason import EmptySOIReason
from llama_index_carag.visualize.cluster_plots import (
    cluster_figure,
    cluster_graph,
    write_cluster_html,
    write_cluster_png,
)
from llama_index_carag.visualize.soi_nodes import read_passages, soi_graph, soi_layout
from llama_index_carag.visualize.soi_plots import soi_figure, soi_png_figure, write_soi_html, write_soi_png
from llama_index_carag.visualize.styles import STANCE_STYLES

__all__ = [
    "STANCE_STYLES",
    "read_passages",
    "EmptySOIReason",
    "soi_graph",
    "soi_layout",
    "soi_figure",
    "soi_png_figure",
    "write_soi_html",
    "write_soi_png",
    "cluster_graph",
    "cluster_figure",
    "write_cluster_html",
    "write_cluster_png",
]
