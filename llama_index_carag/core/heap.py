"""Giving the C heap's free memory back to the operating system: :func:`release_free_memory`.

A fit makes and drops many mid-sized buffers (chunks of BM25 postings, decoded nodes) on several threads.
glibc keeps what they freed in its arenas, so the process's resident memory stays at the fit's high-water
mark although the memory is free; at a million passages that is a few hundred MB, and the next phase of the
fit peaks on top of it.  ``malloc_trim(0)`` returns those free pages.  Elsewhere (macOS, musl, Windows) this
is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Return the C heap's free pages to the operating system; ``True`` when the platform can (glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
