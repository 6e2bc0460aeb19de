"""Shared styles of the figures: node kinds and stances of the SOI and cluster graphs.

Colours of node kinds and of stances are the Okabe-Ito palette; themes get the
Tableau 10 palette in sorted order; methods keep the markers of the papers'
figures.  In the SOI graph a node's *shape* is its kind and its *colour* its
stance (:data:`STANCE_STYLES`); the cluster graph colours by kind.
"""

from __future__ import annotations

from typing import Any

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
        "label": "annotated evidence",
        "color": "#E69F00",
        "size": 20,
        "symbol": "diamond",
        "mpl_size": 200,
        "mpl_marker": "D",
    },
    "related_claim": {
        "label": "related claim",
        "color": "#56B4E9",
        "size": 17,
        "symbol": "square",
        "mpl_size": 170,
        "mpl_marker": "s",
    },
    "thematic_evidence": {
        "label": "thematic cluster evidence",
        "color": "#009E73",
        "size": 13,
        "symbol": "circle",
        "mpl_size": 110,
        "mpl_marker": "o",
    },
    "refined_evidence": {
        "label": "refined cluster evidence",
        "color": "#0072B2",
        "size": 15,
        "symbol": "triangle-up",
        "mpl_size": 140,
        "mpl_marker": "^",
    },
    "retrieved_evidence": {
        "label": "retrieved, not in the SOI",
        "color": "#999999",
        "size": 14,
        "symbol": "hexagon",
        "mpl_size": 150,
        "mpl_marker": "h",
    },
    "evidence": {
        "label": "evidence",
        "color": "#009E73",
        "size": 9,
        "symbol": "circle",
        "mpl_size": 110,
        "mpl_marker": "o",
    },
}

#: Order in which kinds are laid out and listed in legends.
_KIND_ORDER = (
    "claim",
    "annotated_evidence",
    "related_claim",
    "thematic_evidence",
    "refined_evidence",
    "retrieved_evidence",
    "evidence",
)

#: A passage's stance towards the claim → legend label and fill colour (SOI graph).  ``None`` is a
#: node whose stance was not scored (no verdict, a claim, a passage the verdict did not see).
STANCE_STYLES: dict[str | None, dict[str, str]] = {
    "SUPPORTED": {"label": "supports the claim", "color": "#009E73"},
    "REFUTED": {"label": "refutes the claim", "color": "#D55E00"},
    "NOT_ENOUGH_INFO": {"label": "neither (not enough info)", "color": "#8C8C8C"},
    None: {"label": "stance not scored", "color": "#A9C4DE"},
}

#: Outline of the SOI's members (non-members are drawn hollow, in their stance colour).
MEMBER_EDGE = "#1A1A1A"


_EDGE_GREY = "#8C8C8C"
