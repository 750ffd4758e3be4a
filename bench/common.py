"""Shared helpers of the benchmark harness: timers, peak memory, measured subprocesses."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass


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


@dataclass
class ChildRun:
    """What one benchmark subprocess printed last (a JSON object), its wall time and
    its own peak RSS, as the kernel accounted them (``wait4``)."""

    result: dict
    wall_s: float
    peak_rss_gb: float


def run_child(cmd: list[str], what: str, cwd: str | None = None) -> ChildRun:
    """Run ``cmd`` (in ``cwd``) as its own process, so that its peak RSS is its
    workload's alone."""
    with tempfile.TemporaryFile(mode="w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=cwd)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            tail = "\n".join(err.read().strip().splitlines()[-15:])
            raise RuntimeError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    return ChildRun(json.loads(out.strip().splitlines()[-1]), wall, usage.ru_maxrss * 1024 / 1e9)
