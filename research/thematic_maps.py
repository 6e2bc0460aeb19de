"""The papers' thematic maps of explanations (CARAG Figures 8-9, the CARAG-u 3-D view); formerly ``carag map``.

Per-theme density contours (2-D) or translucent convex hulls (3-D) of the projected corpus embeddings, with each
method's explanation points on top: :func:`thematic_map`, :func:`thematic_panels` (one panel per theme),
:func:`thematic_map_3d`.  Themes get the Tableau 10 palette in sorted order (:func:`theme_colors`); methods keep
the markers of the papers' figures.  Run from the repository root on an index built by ``carag index``::

    python -m research.thematic_maps --index idx --explanations expl.csv --out map.png [--panels panels.png] \
        [--map3d map3d.png] [--method pca|tsne]

The explanations file and the joint projection are :mod:`research.explanations`.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from llama_index_carag.core.atomic import atomic_write
from llama_index_carag.visualize.graph_drawing import _new_figure
from llama_index_carag.visualize.text import _mpl_text

if TYPE_CHECKING:  # pragma: no cover - typing only
    import matplotlib.axes
    import matplotlib.figure
    from mpl_toolkits.mplot3d.axes3d import Axes3D

logger = logging.getLogger(__name__)

__all__ = ["theme_colors", "thematic_map", "thematic_panels", "thematic_map_3d", "save_figure", "main"]

#: Qualitative palette for themes (Tableau 10), assigned to themes in sorted order.
_THEME_PALETTE = (
    "#4E79A7",
    "#F28E2B",
    "#59A14F",
    "#B07AA1",
    "#EDC948",
    "#76B7B2",
    "#FF9DA7",
    "#9C755F",
    "#BAB0AC",
    "#E15759",
)

#: Method name (normalised) → (label colour, Matplotlib marker) as in the papers' figures.
_METHOD_STYLES: dict[str, tuple[str, str]] = {
    "rag": ("#D62728", "o"),
    "carag": ("#2CA02C", "D"),
    "caragu": ("#1F77B4", "^"),
}
_EXTRA_METHOD_STYLES = (
    ("#9467BD", "s"),
    ("#FF7F0E", "P"),
    ("#8C564B", "X"),
    ("#E377C2", "v"),
    ("#7F7F7F", "h"),
    ("#BCBD22", "p"),
    ("#17BECF", "*"),
)


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


PointsByMethod = Mapping[str, tuple[Any, Sequence[Any]]]


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


def _legend_handles(
    themes: Sequence[str], colors: Mapping[str, str], methods: Sequence[str], styles: Mapping[str, tuple[str, str]]
) -> tuple[list[Any], list[Any]]:
    """Proxy artists: a patch per theme, a marker per method."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    theme_h = [Patch(facecolor=colors[t], edgecolor=colors[t], alpha=0.45, label=_mpl_text(t, 40)) for t in themes]
    method_h = [
        Line2D(
            [],
            [],
            linestyle="none",
            marker=styles[m][1],
            markerfacecolor=styles[m][0],
            markeredgecolor="black",
            markersize=8,
            label=_mpl_text(m, 30),
        )
        for m in methods
    ]
    return theme_h, method_h


def _add_legends(fig: matplotlib.figure.Figure, theme_h: list[Any], method_h: list[Any]) -> None:
    """Figure legends outside the plot on the right: themes above, methods below."""
    if theme_h:
        fig.legend(handles=theme_h, title="theme", loc="outside right upper", fontsize=8, title_fontsize=9)
    if method_h:
        fig.legend(handles=method_h, title="method", loc="outside right lower", fontsize=8, title_fontsize=9)


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


def save_figure(fig: matplotlib.figure.Figure, path: str | os.PathLike[str], *, dpi: float = 150) -> Path:
    """Save a Matplotlib figure as PNG, atomically (``figsize * dpi`` pixels, no tight cropping); the path written."""
    return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``python -m research.thematic_maps`` (formerly ``carag map``)."""
    p = argparse.ArgumentParser(
        prog="python -m research.thematic_maps", description="thematic map of explanations over per-theme densities"
    )
    p.add_argument("--index", required=True, help="an index folder written by carag index")
    p.add_argument("--explanations", required=True, help="CSV with Theme and one column per method (RAG, CARAG, ...)")
    p.add_argument("--out", required=True, help="PNG of all explanations")
    p.add_argument("--panels", help="PNG with one panel per theme")
    p.add_argument("--map3d", help="PNG of the 3-D PCA view with convex hulls")
    p.add_argument("--method", choices=["pca", "tsne"], default="pca")
    p.add_argument("--methods", help="comma-separated method columns (default: all present)")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Draw the maps of ``--explanations`` over the evidence of ``--index`` (same themes); returns the exit status."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from llama_index_carag.retrieval.retriever import ContextAwareRetriever
    from llama_index_carag.stores.vector_stores import get_node_embeddings
    from research.explanations import load_explanations, project_2d

    args = build_parser().parse_args(argv)
    retriever = ContextAwareRetriever.from_persist_dir(args.index)
    expl = load_explanations(args.explanations, args.methods.split(",") if args.methods else None)
    ids, vectors = get_node_embeddings(retriever.index)
    themes = [n.metadata.get(retriever.theme_key) for n in retriever.index.docstore.get_nodes(ids)]
    keep = [i for i, t in enumerate(themes) if t in set(expl.themes)]
    if not keep:
        raise SystemExit(f"no evidence in the index has one of the explanation themes {sorted(set(expl.themes))}")
    corpus, corpus_themes = vectors[keep], [themes[i] for i in keep]
    model = retriever.embed_model
    embedded = {m: np.asarray(model.get_text_embedding_batch(t, show_progress=True)) for m, t in expl.texts.items()}
    corpus_xy, xy = project_2d(corpus, embedded, method=args.method, random_state=args.seed)
    points = {m: (xy[m], expl.themes) for m in embedded}
    title = f"Explanations over theme densities ({args.method.upper()}, seed {args.seed})"
    written = [save_figure(thematic_map(corpus_xy, corpus_themes, points, title=title), args.out)]
    if args.panels:
        written.append(save_figure(thematic_panels(corpus_xy, corpus_themes, points, title=title), args.panels))
    if args.map3d:
        corpus_xyz, xyz = project_2d(corpus, embedded, method="pca", n_components=3)
        fig = thematic_map_3d(corpus_xyz, corpus_themes, {m: (xyz[m], expl.themes) for m in embedded}, title="3-D PCA")
        written.append(save_figure(fig, args.map3d))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
