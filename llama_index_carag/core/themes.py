"""The themes of a supervised (CARAG) context: each theme's unit centroid, and the theme nearest a vector."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["ThemeCentroids"]


class ThemeCentroids:
    """``{theme: unit centroid, shape (d,)}`` as one matrix, for :meth:`nearest` (empty: no themes)."""

    def __init__(self, centroids: Mapping[str, np.ndarray]) -> None:
        self.by_theme = dict(centroids)
        self._names = list(self.by_theme)
        self._matrix = np.vstack([self.by_theme[t] for t in self._names]) if self._names else None

    def nearest(self, unit_vector: np.ndarray) -> str:
        """The theme whose centroid is most similar (cosine) to a unit vector, shape ``(d,)``."""
        if self._matrix is None:
            raise ValueError("This context has no themes.")
        return self._names[int(np.argmax(self._matrix @ unit_vector))]
