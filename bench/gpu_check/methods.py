"""One task each of L2P, CODA-Prompt, EWC and MOS on a generated JPEG tree, through the
runner's own code path (``cl_bench.run`` on the ``imagefolder`` scenario): step time,
peak memory and the share of training time the GPU waited for data.

The timing comes from a plugin added to every run's strategy (:class:`StepClock`): the
time from the end of one training iteration to the start of the next is the loader's
(decode, transform, transfer), from the start to the end of an iteration (drained) the
step's. Draining the device at each iteration boundary costs a little throughput; it is
what makes the two shares measurable.
"""

from __future__ import annotations

import functools
import statistics
import time
from pathlib import Path

import torch
from avalanche.core import SupervisedPlugin

from bench.gpu_check.extraction import synchronize
from bench.gpu_check.sizes import Sizes
from bench.loader_throughput import make_tree
from cl_bench import api
from cl_bench.cards.catalogue import load_method
from cl_bench.contract import Bookkeeping
from cl_bench.engine import runner

METHODS = ("l2p", "coda-prompt", "ewc", "mos")


class StepClock(Bookkeeping, SupervisedPlugin):
    """Seconds of each training step and of each wait for its batch."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[float] = []
        self.waits: list[float] = []
        self._end: float | None = None
        self._start = 0.0

    def before_training_epoch(self, strategy, **kwargs) -> None:
        synchronize(strategy.device)
        self._end = time.perf_counter()

    def before_training_iteration(self, strategy, **kwargs) -> None:
        self._start = time.perf_counter()
        if self._end is not None:
            self.waits.append(self._start - self._end)

    def after_training_iteration(self, strategy, **kwargs) -> None:
        synchronize(strategy.device)
        self._end = time.perf_counter()
        self.steps.append(self._end - self._start)


def clocked(clocks: list[StepClock]):
    """``runner.method_inputs`` with a fresh :class:`StepClock` among each run's plugins."""
    real = runner.method_inputs

    @functools.wraps(real)
    def method_inputs(*args, **kwargs):
        found = real(*args, **kwargs)
        clocks.append(StepClock())
        found.plugins.append(clocks[-1])
        return found

    return method_inputs


def one_task_settings(method: str, sizes: Sizes) -> dict:
    params = load_method(method).params
    out = {f"{method}.{k}": 1 for k in ("epochs", "ca_epochs") if k in params}
    if sizes.method_batch is not None:
        out |= {
            f"{method}.{k}": sizes.method_batch
            for k in ("batch_size", "eval_batch_size")
            if k in params
        }
    return out | {"scenario.init_cls": sizes.tree_classes, "scenario.increment": sizes.tree_classes}


def methods(sizes: Sizes, device: torch.device, work: Path) -> dict:
    tree = work / "tree"
    made = make_tree(tree, sizes.tree_images, sizes.tree_classes)
    out = {"tree": made}
    for method in METHODS:
        clocks: list[StepClock] = []
        original = runner.method_inputs
        runner.method_inputs = clocked(clocks)
        try:
            t0 = time.perf_counter()
            result = api.run(
                [method],
                scenario="imagefolder",
                data_root=tree,
                backbone=sizes.backbone,
                weights="random",
                image_size=sizes.image_size,
                device=str(device),
                out=work / "out",
                settings=one_task_settings(method, sizes),
                echo=None,
            )[0]
            wall = time.perf_counter() - t0
        finally:
            runner.method_inputs = original
        clock = clocks[-1]
        steps, waits = clock.steps[1:] or clock.steps, clock.waits  # the first step warms up
        out[method] = {
            "steps": len(clock.steps),
            "step_s_median": statistics.median(steps),
            "data_wait_share": sum(waits) / (sum(waits) + sum(clock.steps)),
            "peak_allocated_gb": (result.memory["cuda_max_allocated_bytes"] or 0) / 1e9,
            "peak_rss_gb": result.memory["peak_rss_bytes"] / 1e9,
            "precision": result.config["backbone"]["precision"],
            "wall_s": wall,
            "batch_size": result.config["method"].get("batch_size"),
            "last_acc": result.last_acc,
        }
    return out
