"""Shared by the 2-D and 3-D thematic maps: the points-by-method input, its validation, and the figure legends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_carag.visualize.text import _mpl_text

if TYPE_CHECKING:  # pragma: no cover - typing only
    import matplotlib.figure

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
