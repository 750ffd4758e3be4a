"""Freed memory kept in the process's C heap while ``cl-bench account`` counts.

Every operation of a counting run allocates its output afresh (the zeros of
:mod:`cl_bench.accounting.shapes_only` included), and glibc serves an allocation
above its threshold (128 KiB to start with) by mapping new pages from the kernel
and unmapping them when freed, so that each large output pays a page fault per 4 KiB
page when first written: on a 2-core machine that was half of the CPU time of
counting MOS over 4 tasks of 20 classes on ViT-B/16. Within :func:`heap_kept`, freed
blocks stay in the heap and are reused; on leaving, the thresholds go back to
glibc's defaults and the unused heap is returned to the kernel. Elsewhere than glibc
it changes nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
from collections.abc import Iterator

M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
DEFAULT_THRESHOLD = 128 * 1024  # both thresholds' documented defaults
KEPT_THRESHOLD = 1 << 30


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
    """Within the block, freed memory is reused from the heap (module docstring)."""
    libc = _glibc()
    if libc is None:
        yield
        return
    libc.mallopt(M_MMAP_THRESHOLD, KEPT_THRESHOLD)
    libc.mallopt(M_TRIM_THRESHOLD, KEPT_THRESHOLD)
    try:
        yield
    finally:
        libc.mallopt(M_MMAP_THRESHOLD, DEFAULT_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_THRESHOLD)
        libc.malloc_trim(0)
