"""Freed memory kept in the process's C heap while ``cl-bench account`` counts.

Every operation of a counting run allocates its output afresh (the zeros of
:mod:`cl_bench.accounting.shapes_only` included). glibc serves a large allocation by
mapping new pages from the kernel and unmapping them when it is freed, and trims the
heap's free top back to the kernel, so that each large output pays a page fault per
4 KiB page when first written: a large share of a counting run's time (bench figure
account-scaling), most of all RanPAC's, whose 10,000 x 10,000 float64 Gram matrix is
copied several times a task. Within
:func:`heap_kept`, allocations come from the heap and freed blocks stay there to be
reused; on leaving, glibc's defaults come back and the unused heap is returned to the
kernel. Elsewhere than glibc it changes nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
from collections.abc import Iterator

M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_MAX = -4
DEFAULT_TRIM_THRESHOLD = 128 * 1024  # glibc's documented defaults
DEFAULT_MMAP_MAX = 65536
KEPT = 2**31 - 1  # the largest int: never trim


def _glibc():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018 -- only glibc has it
        return libc
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def heap_kept() -> Iterator[None]:
    """Within the block, allocations come from the heap and freed memory is reused
    (module docstring)."""
    libc = _glibc()
    if libc is None:
        yield
        return
    libc.mallopt(M_MMAP_MAX, 0)
    libc.mallopt(M_TRIM_THRESHOLD, KEPT)
    try:
        yield
    finally:
        libc.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
        libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
        libc.malloc_trim(0)
