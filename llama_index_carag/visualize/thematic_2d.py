"""2-D thematic maps (Figures 8-9 of CARAG): per-theme density contours of a projected corpus, explanation points on top."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

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
    import matplotlib.axes
    import matplotlib.figure

logger = logging.getLogger(__name__)


class _Grid:
    """A shared evaluation grid: ``xx``, ``yy`` of shape ``(res, res)`` and the bounds."""

    def __init__(self, arrays: Sequence[np.ndarray], res: int = 120, pad: float = 0.12) -> None:
        stacked = np.vstack([a for a in arrays if a.size]) if any(a.size for a in arrays) else np.zeros((1, 2))
        stacked = stacked[np.all(np.isfinite(stacked), axis=1)] if np.isfinite(stacked).any() else np.zeros((1, 2))
        lo, hi = stacked.min(axis=0), stacked.max(axis=0)
        span = np.where(hi - lo > 1e-9, hi - lo, 1.0)
        self.lo, self.hi = lo - pad * span, hi + pad * span
        self.xx, self.yy = np.meshgrid(
            np.linspace(self.lo[0], self.hi[0], res), np.linspace(self.lo[1], self.hi[1], res)
        )


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


def _draw_densities(
    ax: matplotlib.axes.Axes, densities: Mapping[str, np.ndarray], grid: _Grid, colors: Mapping[str, str], levels: int
) -> None:
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


def _draw_corpus(
    ax: matplotlib.axes.Axes,
    xy: np.ndarray,
    themes: np.ndarray,
    colors: Mapping[str, str],
    *,
    faint: bool,
    without_density: Iterable[str] = (),
) -> None:
    """The corpus as dots in its theme colours: faint ones (if ``faint``) for every theme,
    clearly visible ones for ``without_density`` themes (too small for a KDE)."""
    bare = set(without_density)
    for theme in sorted(set(themes.tolist())):
        pts = xy[themes == theme]
        if theme in bare:
            ax.scatter(
                pts[:, 0], pts[:, 1], s=18, c=colors[theme], alpha=0.85, edgecolors="white", linewidths=0.4, zorder=3
            )
        elif faint:
            ax.scatter(pts[:, 0], pts[:, 1], s=5, c=colors[theme], alpha=0.35, linewidths=0, zorder=1.5)


def _draw_methods(
    ax: matplotlib.axes.Axes,
    methods: Mapping[str, tuple[np.ndarray, np.ndarray]],
    styles: Mapping[str, tuple[str, str]],
    only_theme: str | None = None,
    *,
    size: float = 70,
) -> None:
    """Each method's points as black-edged markers on top (optionally one theme's only)."""
    for method, (pts, labels) in methods.items():
        if only_theme is not None:
            pts = pts[labels == only_theme]
        if len(pts):
            color, marker = styles[method]
            ax.scatter(
                pts[:, 0],
                pts[:, 1],
                s=size,
                c=color,
                marker=marker,
                edgecolors="black",
                linewidths=0.7,
                zorder=6,
                alpha=0.95,
            )


def thematic_map(
    corpus_xy: Any,
    corpus_themes: Sequence[Any],
    points: PointsByMethod | None,
    *,
    title: str | None = None,
    levels: int = 5,
    figsize: tuple[float, float] = (9.0, 6.5),
    show_corpus: bool = True,
) -> matplotlib.figure.Figure:
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


def _style_2d(ax: matplotlib.axes.Axes, grid: _Grid) -> None:
    ax.set_xlim(grid.lo[0], grid.hi[0])
    ax.set_ylim(grid.lo[1], grid.hi[1])
    ax.set_xlabel("component 1")
    ax.set_ylabel("component 2")
    ax.tick_params(labelsize=8)
    ax.grid(True, linewidth=0.3, alpha=0.5)


def thematic_panels(
    corpus_xy: Any,
    corpus_themes: Sequence[Any],
    points: PointsByMethod | None,
    *,
    title: str | None = None,
    levels: int = 5,
    ncols: int | None = None,
    panel_size: tuple[float, float] = (4.2, 3.6),
    show_corpus: bool = False,
) -> matplotlib.figure.Figure:
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
