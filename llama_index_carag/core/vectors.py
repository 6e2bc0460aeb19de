"""Small pure helpers for the vector maths of CARAG, and the block-wise layout of a large embedding matrix.

Every function takes and returns NumPy arrays and states the shapes it expects (``n`` is a number of vectors,
``d`` their dimension); none mutates its inputs, except the ``*_inplace`` layout helpers.

A large embedding matrix is laid out with no second copy of it (at a million 384-d vectors a float32 matrix is
1.5 GB, so every temporary of its size counts in the peak memory of a fit), ``block`` rows at a time:

* :func:`row_norms` — the rows' L2 norms without the full-size ``X * X`` temporary that
  ``np.linalg.norm(X, axis=1)`` makes;
* :func:`permute_rows_inplace` — ``X[:] = X[order]`` without the full-size gathered copy (cycle by cycle);
* :func:`divide_rows_inplace` — ``X /= norms[:, None]`` block by block;
* :func:`spread_blocks_inplace` — consecutive blocks of rows moved apart in place, leaving room after each
  (what inserts append into, instead of copying their clusters); :func:`growth_rows` says how much room.

The results are bit-for-bit those of the one-shot NumPy expressions.  The ``*_inplace`` helpers overwrite their
input: call them only on a matrix the caller owns and gives away (``ThematicContext.fit(items, copy=False)``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

_FINITE_BLOCK = 65_536


def as_matrix(vectors: Sequence[Sequence[float]] | np.ndarray, *, name: str = "embeddings") -> np.ndarray:
    """Return ``vectors`` as a finite float32 matrix of shape ``(n, d)``.

    Raises:
        ValueError: the input is not two-dimensional, is empty in ``d``, or
            holds NaN/inf values (the message names ``name`` and the first bad row).
    """
    try:
        matrix = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a rectangular array of numbers ({exc}).") from None
    if matrix.ndim == 1 and matrix.size == 0:
        matrix = matrix.reshape(0, 0)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must have shape (n, d); got an array of shape {matrix.shape}.")
    if matrix.shape[0] and matrix.shape[1] == 0:
        raise ValueError(f"{name} have dimension 0.")
    for start in range(0, matrix.shape[0], _FINITE_BLOCK):  # in blocks: no (n, d) temporary
        finite = np.isfinite(matrix[start : start + _FINITE_BLOCK]).all(axis=1)
        if not finite.all():
            bad = start + int(np.flatnonzero(~finite)[0])
            raise ValueError(f"{name} contain NaN or infinite values (first at row {bad}).")
    return matrix


def as_vector(
    vector: Sequence[float] | np.ndarray, *, dim: int | None = None, name: str = "query embedding"
) -> np.ndarray:
    """Return ``vector`` as a finite float32 array of shape ``(d,)``.

    Args:
        vector: the vector, shape ``(d,)`` (a ``(1, d)`` array is accepted).
        dim: the dimension it must have, if known.
        name: how error messages call it.

    Raises:
        ValueError: wrong shape, wrong dimension, or NaN/inf values.
    """
    try:
        arr = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a sequence of numbers ({exc}).") from None
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must have shape (d,); got {arr.shape}.")
    if dim is not None and arr.shape[0] != dim:
        raise ValueError(
            f"{name} has dimension {arr.shape[0]} but the corpus embeddings have dimension {dim}; "
            "were the index and the embed model built with different models?"
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite values.")
    return arr


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Scale each row (or a single vector) to unit L2 norm.

    Args:
        vectors: shape ``(n, d)`` or ``(d,)``.

    Returns:
        float32 array of the same shape; zero rows stay zero (no division by 0).
    """
    arr = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(arr, axis=-1, keepdims=True)
    norms = np.where(norms > 0, norms, 1.0).astype(np.float32)
    return arr / norms


def cosine_similarities(query: np.ndarray, unit_matrix: np.ndarray, *, normalized: bool = False) -> np.ndarray:
    """Cosine similarity of one query with every row of an L2-normalised matrix.

    Args:
        query: shape ``(d,)``; need not be normalised (``normalized=True``: it is a float32
            unit vector already, used as is).
        unit_matrix: shape ``(n, d)``, rows already of unit norm (zero rows allowed).

    Returns:
        float32 array of shape ``(n,)`` with values in ``[-1, 1]`` (0 for a zero
        query or a zero row).
    """
    q = query if normalized else l2_normalize(np.asarray(query, dtype=np.float32))
    n = unit_matrix.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.float32)
    # einsum, not BLAS: as fast single-threaded, and it never wakes BLAS's worker threads, whose
    # spinning on a few cores would slow down the vector store's (OpenMP) search that follows.
    pool = scan_pool() if n >= _PARALLEL_ROWS else None
    if pool is None:
        return np.clip(np.einsum("ij,j->i", unit_matrix, q), -1.0, 1.0)
    # A large cluster is scanned in slices on all cores (einsum releases the GIL): the scan is
    # memory-bound, and one thread cannot use the machine's bandwidth.
    out = np.empty(n, dtype=np.float32)
    step = -(-n // pool._max_workers)

    def part(start: int) -> None:
        np.einsum("ij,j->i", unit_matrix[start : start + step], q, out=out[start : start + step])

    list(pool.map(part, range(0, n, step)))
    return np.clip(out, -1.0, 1.0, out=out)


_PARALLEL_ROWS = 16_384
_POOL: Any = None
#: The name prefix of the scan pool's threads (idle between scans: each scan is awaited by the query that asked).
SCAN_THREADS = "carag-scan"


def scan_pool() -> Any:
    """A small thread pool for scanning large clusters (created on first use; ``None`` on one core)."""
    global _POOL
    if _POOL is None:
        import os
        from concurrent.futures import ThreadPoolExecutor

        workers = min(4, os.cpu_count() or 1)
        _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=SCAN_THREADS) if workers > 1 else False
    return _POOL or None


def thematic_embedding(soi_vectors: np.ndarray) -> np.ndarray | None:
    """The thematic embedding T: the element-wise mean of the SOI's vectors.

    Args:
        soi_vectors: shape ``(m, d)``, the embeddings of the SOI items (the claim
            itself excluded, as in the papers' Equation 1).

    Returns:
        shape ``(d,)`` float32, or ``None`` when ``m == 0`` (an empty SOI has no theme).
    """
    if soi_vectors.shape[0] == 0:
        return None
    return soi_vectors.mean(axis=0, dtype=np.float64).astype(np.float32)


def blend_query(query: np.ndarray, theme: np.ndarray | None, alpha: float) -> np.ndarray:
    """The combined retrieval vector ``alpha * query + (1 - alpha) * theme``.

    Args:
        query: the claim (query) embedding, shape ``(d,)``.
        theme: the thematic embedding T, shape ``(d,)``, or ``None`` for an empty SOI.
        alpha: weight of the claim in ``[0, 1]``; ``1`` is plain RAG.

    Returns:
        shape ``(d,)`` float32.  When ``theme`` is ``None`` or ``alpha == 1`` the
        query is returned unchanged (same values, so scores match plain RAG
        exactly); otherwise the blend is L2-normalised so that inner-product
        scores stay cosine similarities.
    """
    q = np.asarray(query, dtype=np.float32)
    if theme is None or alpha >= 1.0:
        return q
    combined = alpha * q.astype(np.float64) + (1.0 - alpha) * np.asarray(theme, dtype=np.float64)
    norm = float(np.linalg.norm(combined))
    if norm == 0.0:
        logger.warning("The blended query vector is zero; falling back to the claim vector.")
        return q
    return (combined / norm).astype(np.float32)


_BLOCK = 65_536


def row_norms(X: np.ndarray, *, block: int = _BLOCK) -> np.ndarray:
    """L2 norm of every row of ``X`` (shape ``(n, d)``), shape ``(n,)`` in ``X``'s dtype.

    Equal to ``np.linalg.norm(X, axis=1)``, with temporaries of ``block`` rows only.
    """
    out = np.empty(X.shape[0], dtype=X.dtype)
    for start in range(0, X.shape[0], block):
        out[start : start + block] = np.linalg.norm(X[start : start + block], axis=1)
    return out


def divide_rows_inplace(X: np.ndarray, divisors: np.ndarray, *, block: int = _BLOCK) -> None:
    """``X /= divisors[:, None]`` in place (``X`` shape ``(n, d)``, ``divisors`` shape ``(n,)``), block by block."""
    d = np.asarray(divisors, dtype=X.dtype)
    for start in range(0, X.shape[0], block):
        X[start : start + block] /= d[start : start + block, None]


def permute_rows_inplace(X: np.ndarray, order: np.ndarray, *, block: int = _BLOCK) -> None:
    """Reorder the rows of ``X`` in place so that row ``i`` becomes the old row ``order[i]``.

    Args:
        X: shape ``(n, d)``, writable; overwritten.
        order: a permutation of ``range(n)``, shape ``(n,)``.

    Each cycle of the permutation ``i -> order[i]`` is shifted by one place, ``block`` rows at a
    time (the gathered right-hand side of one assignment is the only temporary), and the cycle's
    first row, saved beforehand, closes it.

    Raises:
        ValueError: ``order`` is not a permutation of ``range(n)``.
    """
    n = X.shape[0]
    order = np.asarray(order, dtype=np.int64)
    if order.shape != (n,) or (n and not np.array_equal(np.bincount(order, minlength=n), np.ones(n, np.int64))):
        raise ValueError(f"order must be a permutation of range({n}).")
    moved = np.flatnonzero(order != np.arange(n)).tolist()  # fixed points stay
    nxt = order.tolist()
    visited = bytearray(n)
    for start in moved:
        if visited[start]:
            continue
        cycle = [start]
        visited[start] = 1
        j = nxt[start]
        while j != start:
            cycle.append(j)
            visited[j] = 1
            j = nxt[j]
        _shift_cycle(X, np.asarray(cycle, dtype=np.int64), block)


def _shift_cycle(X: np.ndarray, cycle: np.ndarray, block: int) -> None:
    """``X[cycle[k]] = X[cycle[k + 1]]`` for every ``k``, and the last takes the first's old row."""
    first = X[cycle[0]].copy()
    last = len(cycle) - 1
    for a in range(0, last, block):
        b = min(a + block, last)
        X[cycle[a:b]] = X[cycle[a + 1 : b + 1]]  # sources a+1..b are not yet overwritten (dests < b)
    X[cycle[last]] = first


def growth_rows(n: int) -> int:
    """Spare rows kept for ``n`` rows laid out by a fit (about 3 %, at least 64): inserts append into them
    until they are full, instead of copying their clusters."""
    return n // 32 + 64


def spread_blocks_inplace(buffer: np.ndarray, sizes: list[int], room: list[int], *, block: int = _BLOCK) -> list[int]:
    """Move consecutive blocks of rows apart, in place, so that ``room[k]`` free rows follow block ``k``.

    Args:
        buffer: shape ``(r, d)``, writable; its first ``sum(sizes)`` rows hold the blocks one after the other,
            and ``r >= sum(sizes) + sum(room)``.
        sizes: rows of each block, in order.
        room: free rows wanted after each block.

    Returns:
        each block's new first row.  Blocks move from the last to the first, in chunks no longer than the
        distance moved (a chunk never overlaps its destination, so no temporary is made).
    """
    if len(sizes) != len(room) or min(room, default=0) < 0:
        raise ValueError("sizes and room must have the same length, room >= 0.")
    if sum(sizes) + sum(room) > buffer.shape[0]:
        raise ValueError(f"{sum(sizes)} rows and {sum(room)} spare rows do not fit in {buffer.shape[0]}.")
    old = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64) if sizes else np.zeros(0, np.int64)
    shift = np.concatenate(([0], np.cumsum(room)[:-1])).astype(np.int64) if room else np.zeros(0, np.int64)
    for k in range(len(sizes) - 1, -1, -1):
        start, by, size = int(old[k]), int(shift[k]), int(sizes[k])
        if by == 0 or size == 0:
            continue
        step = min(block, by)
        for stop in range(start + size, start, -step):
            a = max(start, stop - step)
            buffer[a + by : stop + by] = buffer[a:stop]
    return (old + shift).tolist()
