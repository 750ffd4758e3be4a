"""Runs in a fresh process (``python -m cl_bench run``), killed after a task and resumed;
the numbers a resumed run must reproduce."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from cl_bench.engine import checkpoint
from tests.helpers.paths import REPO

VIT_STREAM = [
    "--scenario",
    "synthetic",
    "--backbone",
    "vit_tiny_patch16_224",
    "--weights",
    "random",
    "--image-size",
    "32",
    "--precision",
    "fp32",
    "--no-progress",
    "--set",
    "scenario.init_cls=4",
    "--set",
    "scenario.increment=3",  # 3 tasks: 4+3+3
    "--set",
    "scenario.dataset_args={train_per_class: 6, test_per_class: 3}",
]


NUMBERS = (
    "acc_matrix",
    "acc_seen",
    "avg_acc",
    "last_acc",
    "avg_acc_task_mean",
    "forgetting",
    "bwt",
    "routing_acc",
    "accounting",
    "class_order",
    "config",
)


def cl_bench(out: Path, *args: str, kill_after: int | None = None) -> subprocess.CompletedProcess:
    """``cl-bench run --out out ...`` in a fresh process (the feature cache is the
    test run's private one, through the environment); ``kill_after``: the process
    SIGKILLs itself once that task's checkpoint is written (:mod:`tests.helpers.killed_run`)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    entry = ["cl_bench"] if kill_after is None else ["tests.helpers.killed_run", str(kill_after)]
    return subprocess.run(
        [sys.executable, "-m", *entry, "run", "--out", str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


def records(out: Path) -> dict[str, dict]:
    found = [json.loads(p.read_text()) for p in sorted(out.glob("runs/*/*/*.json"))]
    return {r["method"]: r for r in found}


def ckpts(out: Path) -> list[Path]:
    return sorted(out.glob("runs/*/*/*.ckpt"))


def resumed_line(method: str, task: int, tasks: int) -> str:
    return f"resuming {method} seed 1993 at task {task}/{tasks} from "


def kill_and_resume(
    out: Path, args: list[str], methods: list[str], kill_after: int, tasks: int
) -> dict[str, dict]:
    """Kill each method once after task ``kill_after`` (0-based) and resume it (see the
    module docstring); returns the final records."""
    command = [*args, "--methods", ",".join(methods)]
    for k, method in enumerate(methods):
        run = cl_bench(out, *command, kill_after=kill_after)
        assert run.returncode == -signal.SIGKILL, run.stdout + run.stderr
        assert sorted(records(out)) == methods[:k]
        [saved] = ckpts(out)
        assert saved.parent.name == method
        assert checkpoint.read(saved)["done"] == kill_after + 1
        if k:
            assert resumed_line(methods[k - 1], kill_after + 2, tasks) in run.stdout
    final = cl_bench(out, *command)
    assert final.returncode == 0, final.stdout + final.stderr
    assert resumed_line(methods[-1], kill_after + 2, tasks) in final.stdout
    assert ckpts(out) == [] and sorted(records(out)) == sorted(methods)
    return records(out)


def assert_same_numbers(resumed: dict, reference: dict) -> None:
    for key in NUMBERS:
        assert resumed[key] == reference[key], key
    assert len(resumed["timing"]["train_s"]) == len(reference["timing"]["train_s"])
