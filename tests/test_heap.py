"""``release_free_memory`` hands the C heap's free pages back to the operating system (glibc)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pytest

from llama_index_carag.core.heap import _malloc_trim, release_free_memory


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux") or _malloc_trim() is None, reason="glibc only")
def test_freed_heap_memory_leaves_the_process():
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size, count = 64 * 1024, 2048  # 128 MB in blocks below malloc's mmap threshold: they live in the heap
    blocks = [libc.malloc(size) for _ in range(count)]
    assert all(blocks)
    for b in blocks:
        ctypes.memset(b, 1, size)  # resident
    for b in blocks[:-1]:
        libc.free(b)  # the last block pins the heap's top: free alone returns nothing
    before = _rss_mb()
    assert release_free_memory()
    after = _rss_mb()
    libc.free(blocks[-1])
    assert before - after > 64, (before, after)


def test_it_is_safe_to_call_anywhere():
    first, second = release_free_memory(), release_free_memory()
    assert first == second == (_malloc_trim() is not None)
