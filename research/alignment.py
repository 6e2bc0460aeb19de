"""The papers' thematic alignment of explanations (CARAG Tables 4–5, CARAG-u Table 1a/1b).

Definition, as used here and checked against the published numbers:

1. Embed every explanation (one per claim and method) and the corpus points
   (by default: all evidence passages of the themes) with one encoder.
2. Project explanations and corpus **together** to 2-D, with PCA or with t-SNE
   (fixed seed).
3. A theme's centroid is the mean of that theme's corpus points in the 2-D space.
4. An explanation's distance is the Euclidean distance from its 2-D point to the
   centroid of its claim's theme.
5. Report, per theme and method, the mean distance; the overall average is the
   mean of the per-theme means; differences are ``method − RAG`` (negative =
   closer to the theme than RAG).

Lower is "more thematically aligned".  t-SNE distances depend on the run (seed,
perplexity, which points are projected); report them with their seed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from research.explanations import project_2d

logger = logging.getLogger(__name__)

__all__ = ["centroid_distances", "AlignmentTable", "thematic_alignment"]


def centroid_distances(
    corpus_xy: np.ndarray,
    corpus_themes: Sequence[str],
    points_xy: np.ndarray,
    point_themes: Sequence[str],
) -> np.ndarray:
    """Euclidean distance of each point to the centroid of its theme's corpus points.

    Args:
        corpus_xy: ``(n, k)`` projected corpus; corpus_themes: its ``n`` themes.
        points_xy: ``(m, k)`` projected explanations; point_themes: their ``m`` themes.

    Returns:
        ``(m,)`` distances.

    Raises:
        ValueError: a point's theme has no corpus points.
    """
    themes = np.asarray(list(corpus_themes), dtype=object)
    centroids: dict[str, np.ndarray] = {}
    out = np.empty(len(point_themes), dtype=np.float64)
    for i, theme in enumerate(point_themes):
        if theme not in centroids:
            mask = themes == theme
            if not mask.any():
                raise ValueError(f"Theme {theme!r} has no corpus points to form a centroid.")
            centroids[theme] = corpus_xy[mask].mean(axis=0)
        out[i] = float(np.linalg.norm(points_xy[i] - centroids[theme]))
    return out


@dataclass
class AlignmentTable:
    """Per-theme mean distances for each method and projection.

    Attributes:
        per_claim: ``{projection: {method: (m,) distances}}``.
        themes: the explanations' themes (``m``).
        seed: t-SNE seed.
    """

    per_claim: dict[str, dict[str, np.ndarray]]
    themes: list[str]
    seed: int
    baseline: str = "RAG"
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        first = next(iter(self.per_claim.values()))
        return list(first)

    @property
    def theme_names(self) -> list[str]:
        return sorted(set(self.themes))

    def average(self, projection: str, method: str, theme: str | None = None) -> float:
        """Mean distance for one theme, or (``theme=None``) the mean of the per-theme means."""
        d = self.per_claim[projection][method]
        themes = np.asarray(self.themes, dtype=object)
        if theme is not None:
            return float(d[themes == theme].mean())
        return float(np.mean([d[themes == t].mean() for t in self.theme_names]))

    def to_dict(self, *, overall: bool = True) -> dict[str, dict[str, dict[str, float]]]:
        """``{theme: {method: {"pca": avg, "tsne": avg}}}``, plus ``"Overall"`` (mean of theme means) if asked."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for theme in [*self.theme_names, *([None] if overall else [])]:
            key = theme if theme is not None else "Overall"
            out[key] = {m: {p: round(self.average(p, m, theme), 6) for p in self.per_claim} for m in self.methods}
        return out

    def diffs(self) -> dict[str, dict[str, dict[str, float]]]:
        """``{theme: {method: {projection: avg(method) − avg(baseline)}}}`` for non-baseline methods."""
        table = self.to_dict()
        out: dict[str, dict[str, dict[str, float]]] = {}
        for theme, row in table.items():
            if self.baseline not in row:
                continue
            out[theme] = {
                m: {p: round(v - row[self.baseline][p], 6) for p, v in vals.items()}
                for m, vals in row.items()
                if m != self.baseline
            }
        return out

    def to_markdown(self, published: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None) -> str:
        """A Markdown table: theme, method, PCA, t-SNE (and the published value when given)."""
        projections = list(self.per_claim)
        header = ["theme", "method", *[p.upper() if p == "pca" else "t-SNE" for p in projections]]
        if published:
            header += ["published PCA", "Δ vs published"]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        table = self.to_dict()
        for theme, row in table.items():
            for method, vals in row.items():
                cells = [theme, method, *[f"{vals[p]:.4f}" for p in projections]]
                if published:
                    pub = published.get(theme, {}).get(method, {}).get("pca")
                    cells += ["" if pub is None else f"{pub:.4f}", "" if pub is None else f"{vals['pca'] - pub:+.4f}"]
                lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


def thematic_alignment(
    corpus_vectors: np.ndarray,
    corpus_themes: Sequence[str],
    explanations: Mapping[str, np.ndarray],
    explanation_themes: Sequence[str],
    *,
    projections: Sequence[str] = ("pca", "tsne"),
    seed: int = 0,
    baseline: str = "RAG",
    n_components: int = 2,
) -> AlignmentTable:
    """Compute the alignment table (see the module docstring for the definition).

    Args:
        corpus_vectors: ``(n, d)`` corpus embeddings with ``corpus_themes``.
        explanations: method → ``(m, d)`` explanation embeddings, rows aligned
            with ``explanation_themes`` (the same claims for every method).
        projections: any of ``"pca"``, ``"tsne"``.
        seed: t-SNE seed.
        baseline: the method the differences are taken against.
        n_components: dimension of the projection (2 = the CARAG paper's Table 4;
            the CARAG-u paper's Table 1a "PCA" columns reproduce with 3).
    """
    themes = list(explanation_themes)
    for name, block in explanations.items():
        if len(block) != len(themes):
            raise ValueError(f"{name}: {len(block)} explanations but {len(themes)} themes.")
    per_claim: dict[str, dict[str, np.ndarray]] = {}
    for projection in projections:
        corpus_xy, xy = project_2d(
            corpus_vectors, explanations, method=projection, random_state=seed, n_components=n_components
        )
        per_claim[projection] = {m: centroid_distances(corpus_xy, corpus_themes, xy[m], themes) for m in explanations}
    return AlignmentTable(per_claim, themes, seed, baseline, meta={"n_components": n_components})
