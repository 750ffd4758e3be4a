"""Figure loop-under-load: the features-only training loop on a busy machine: TOSCA on
cached features (one task of 2 classes x 500 features, as in loop-overhead), idle and
with one CPU-bound competing process per core, at the old thread count (all cores) and
at the one thread that runner.run_one now uses for features-only methods. OpenMP threads
spin-wait for each other at every parallel region, so a tiny step at two threads stalls
whenever a competitor holds one of the cores; target loaded/idle <= 2.5x at one thread.

    python -m bench.loop_under_load [epochs]    # default 100
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from bench.common import timed
from bench.loop_overhead import avalanche_loop, data
from cl_bench.cards.catalogue import load_method
from cl_bench.contract import usable_cpus
from cl_bench.engine.environment import threads

SPIN_LIMIT_S = 600  # a competitor that outlives its parent stops by itself


def _spin(deadline: float) -> None:
    while time.time() < deadline:
        sum(i * i for i in range(1000))


@contextmanager
def competitors(n: int) -> Iterator[None]:
    """``n`` processes each keeping one core busy in a Python loop while inside."""
    ctx = mp.get_context("fork")  # the child only spins: no torch state is touched
    procs = [
        ctx.Process(target=_spin, args=(time.time() + SPIN_LIMIT_S,), daemon=True) for _ in range(n)
    ]
    for p in procs:
        p.start()
    time.sleep(0.5)  # let them reach their loop
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()


def main(epochs: int = 100) -> dict:
    params = dict(load_method("tosca").params, epochs=epochs)
    x, y = data()
    cores = usable_cpus()

    def train() -> None:
        torch.manual_seed(0)
        avalanche_loop(x, y, params)

    out: dict = {"epochs": epochs, "cores": cores, "competitors": cores}
    for label, n in (("old", cores), ("new", 1)):
        with threads(n):
            idle = timed(train)
            with competitors(cores):
                loaded = timed(train)
        out[label] = {
            "threads": n,
            "idle_s": idle,
            "loaded_s": loaded,
            "loaded_over_idle": loaded / idle,
        }
    out["loaded_old_over_new"] = out["old"]["loaded_s"] / out["new"]["loaded_s"]
    return out


if __name__ == "__main__":
    from bench.run import record

    result = main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
    print(json.dumps(result))
    record("loop-under-load", result, ["-m", "bench.loop_under_load", *sys.argv[1:2]])
