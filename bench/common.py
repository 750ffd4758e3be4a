"""Shared helpers of the benchmark harness: timers and peak memory."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable


def timed(fn: Callable[[], object], repeat: int = 1) -> float:
    """Best wall time of ``repeat`` calls (the machine is shared and noisy)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
