"""The 3-D thematic map (CARAG-u): a translucent convex hull per theme of a projected corpus, explanation points on top."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from llama_index_carag.visualize.output import _new_figure
from llama_index_carag.visualize.styles import _method_styles, theme_colors
from llama_index_carag.visualize.text import _mpl_text
from llama_index_carag.visualize.thematic_common import (
    PointsByMethod,
    _add_legends,
    _check_points,
    _checked_methods,
    _legend_handles,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import matplotlib.figure
    from mpl_toolkits.mplot3d.axes3d import Axes3D

logger = logging.getLogger(__name__)


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
    corpus_xyz: Any,
    corpus_themes: Sequence[Any],
    points: PointsByMethod | None,
    *,
    title: str | None = None,
    figsize: tuple[float, float] = (9.0, 7.0),
    alpha: float = 0.12,
    show_corpus: bool = True,
    elev: float = 22.0,
    azim: float = -60.0,
) -> matplotlib.figure.Figure:
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
    xyz, themes = _check_points(corpus_xyz, corpus_themes, 3, "corpus_xyz")
    methods = _checked_methods(points, 3)
    all_themes = sorted(set(themes.tolist()) | {t for _, labels in methods.values() for t in labels.tolist()})
    colors = theme_colors(all_themes)
    styles = _method_styles(methods)

    fig = _new_figure(*figsize, 100, layout="constrained")
    ax = cast("Axes3D", fig.add_subplot(projection="3d"))  # the stubs type add_subplot as 2D Axes
    _draw_hulls(ax, xyz, themes, colors, alpha=alpha, show_corpus=show_corpus)
    for method, (pts, _) in methods.items():
        if len(pts):
            color, marker = styles[method]
            ax.scatter(
                *pts.T, s=60, c=color, marker=marker, edgecolors="black", linewidths=0.7, depthshade=False, alpha=1.0
            )
    _fit_limits_3d(ax, [xyz, *[p for p, _ in methods.values()]])
    _style_3d(ax, elev=elev, azim=azim)
    ax.set_title(_mpl_text(title if title is not None else "Thematic 3-D map with explanation points", 120))
    _add_legends(fig, *_legend_handles(all_themes, colors, list(methods), styles))
    return fig


def _draw_hulls(
    ax: Axes3D,
    xyz: np.ndarray,
    themes: np.ndarray,
    colors: Mapping[str, str],
    *,
    alpha: float,
    show_corpus: bool,
) -> None:
    """Per theme (sorted): its convex hull and faint corpus dots, or clearly visible dots when it has no hull."""
    from matplotlib.colors import to_rgba
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    for theme in sorted(set(themes.tolist())):
        pts = xyz[themes == theme]
        faces = _hull_faces(pts)
        if faces is None:
            logger.info("Theme %r has fewer than 4 affinely independent points: no convex hull.", theme)
        else:
            ax.add_collection3d(
                Poly3DCollection(
                    faces,
                    facecolors=to_rgba(colors[theme], alpha),
                    edgecolors=to_rgba(colors[theme], min(1.0, 2 * alpha)),
                    linewidths=0.3,
                )
            )
        if faces is None and len(pts):  # no hull: show the theme's points clearly instead
            ax.scatter(*pts.T, s=16, c=colors[theme], alpha=0.85, depthshade=False)
        elif show_corpus and len(pts):
            ax.scatter(*pts.T, s=4, c=colors[theme], alpha=0.35, depthshade=False)


def _fit_limits_3d(ax: Axes3D, arrays: Sequence[np.ndarray]) -> None:
    """Axis limits around every finite point of ``arrays`` (5 % padding); left alone when there is none."""
    every = [a for a in arrays if a.size]
    if every:
        stacked = np.vstack(every)
        stacked = stacked[np.all(np.isfinite(stacked), axis=1)]
        if len(stacked):
            lo, hi = stacked.min(axis=0), stacked.max(axis=0)
            pad = np.where(hi - lo > 1e-9, hi - lo, 1.0) * 0.05
            ax.set_xlim(lo[0] - pad[0], hi[0] + pad[0])
            ax.set_ylim(lo[1] - pad[1], hi[1] + pad[1])
            ax.set_zlim(lo[2] - pad[2], hi[2] + pad[2])


def _style_3d(ax: Axes3D, *, elev: float, azim: float) -> None:
    """The fixed camera, axis labels and tick sizes."""
    ax.view_init(elev=elev, azim=azim)
    ax.set_xlabel("component 1", fontsize=8)
    ax.set_ylabel("component 2", fontsize=8)
    ax.set_zlabel("component 3", fontsize=8)
    ax.tick_params(labelsize=7)
