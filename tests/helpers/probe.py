"""`probe`, a test-only method for grids in worker processes and on the SLURM cluster:
its module, card and driver (installed by the ``probe`` fixture, tests/conftest.py), the
grid's arguments, and the count of its starts."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

PROBE_MODULE = '''
import os
import time
from pathlib import Path

import torch

from cl_bench.strategies.simplecil import SimpleCIL


class Probe(SimpleCIL):
    """SimpleCIL that logs its seed, then fails (PROBE_FAIL; PROBE_OOM: out of memory, as
    CUDA raises it) or waits for PROBE_GO
    (PROBE_HOLD: seeds or "all"); with PROBE_HOLD_TASK=k (or k@seed,seed) it also
    waits for PROBE_GO before training task k (tasks count from 0), after the earlier
    tasks' checkpoints, and notes the wait in PROBE_LOG.hold."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        seed = self.probe_seed = str(torch.initial_seed())  # run_one seeds torch with it
        with open(os.environ["PROBE_LOG"], "a") as f:
            f.write(f"{seed} {os.getpid()}\\n")
        if seed in os.environ.get("PROBE_FAIL", "").split(","):
            raise RuntimeError(f"probe failure for seed {seed}")
        if seed in os.environ.get("PROBE_OOM", "").split(","):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        hold = os.environ.get("PROBE_HOLD", "").split(",")
        if "all" in hold or seed in hold:
            while not Path(os.environ["PROBE_GO"]).exists():
                time.sleep(0.05)

    def train(self, experiences, *args, **kwargs):
        task, _, seeds = os.environ.get("PROBE_HOLD_TASK", "").partition("@")
        go = Path(os.environ["PROBE_GO"])
        mine = not seeds or self.probe_seed in seeds.split(",")
        if task and mine and experiences.current_experience == int(task) and not go.exists():
            with open(os.environ["PROBE_LOG"] + ".hold", "a") as f:
                f.write(f"{self.probe_seed} {os.getpid()}\\n")
            while not go.exists():
                time.sleep(0.05)
        return super().train(experiences, *args, **kwargs)
'''

PROBE_CARD = """name: probe
title: Probe
strategy: cl_probe:Probe
inputs: features
backbones: any
defaults:
  batch_size: 128
  eval_batch_size: 128
"""

DRIVER = """import sys
from pathlib import Path

import cl_bench.cards.catalogue

if __name__ == "__main__":
    cl_bench.cards.catalogue.METHODS_DIR = Path(sys.argv[1])
    from cl_bench.commands.cli import app
    app(sys.argv[2:], prog_name="cl-bench")
"""

GRID = ["--scenario", "synthetic", "--methods", "probe", "--no-progress"]


def starts(home: Path) -> Counter:
    """How many times each seed's run started (one log line per start)."""
    log = home / "probe.log"
    return (
        Counter(line.split()[0] for line in log.read_text().splitlines())
        if (log.exists())
        else Counter()
    )


def interruptible() -> None:
    """In the child, before Python starts: Ctrl-C's default disposition, as a terminal
    gives it. A test run started in the background (``cmd &`` in a script) inherits
    SIGINT ignored, and Python then installs no KeyboardInterrupt handler at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
