"""Laying out a large embedding matrix with no second copy of it: block-wise norms, in-place row order.

At a million 384-d vectors a float32 matrix is 1.5 GB, so every temporary of its size counts in
the peak memory of a fit.  These helpers work block by block (``block`` rows at a time):

* :func:`row_norms` — the rows' L2 norms without the full-size ``X * X`` temporary that
  ``np.linalg.norm(X, axis=1)`` makes;
* :func:`permute_rows_inplace` — ``X[:] = X[order]`` without the full-size gathered copy
  (cycle by cycle, each cycle moved in blocks);
* :func:`divide_rows_inplace` — ``X /= norms[:, None]`` block by block;
* :func:`spread_blocks_inplace` — consecutive blocks of rows moved apart in place, leaving room after each
  (what inserts append into, instead of copying their clusters); :func:`growth_rows` says how much room.

The results are bit-for-bit those of the one-shot NumPy expressions.  :func:`permute_rows_inplace` and
:func:`divide_rows_inplace` overwrite their input: call them only on a matrix the caller owns and
gives away (``ThematicContext.fit(items, copy=False)``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["row_norms", "permute_rows_inplace", "divide_rows_inplace", "spread_blocks_inplace", "growth_rows"]

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
