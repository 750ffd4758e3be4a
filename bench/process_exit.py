"""Figure process-exit: how long a `cl-bench` process takes to end once its work is
done: CPython's own teardown after importing what a run imports (torch, timm, Avalanche,
cl-bench) against the entry point's quick exit (``cl_bench.commands.quick_exit``), in
one invocation.

Each child imports the stack, prints the wall clock, and ends one way or the other;
the parent takes the clock when the child has been reaped. The two kinds alternate,
``rounds`` of each, and the medians are compared.

    python -m bench.process_exit 5
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

CHILD = """
import time
import cl_bench.grid.launch, timm
from cl_bench.commands.quick_exit import exit_quickly
print(time.time(), flush=True)
if {quick}:
    exit_quickly(0)
"""


def exit_seconds(quick: bool) -> float:
    """Seconds from the end of a child's work to its reaping."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(quick=quick)],
        capture_output=True,
        text=True,
        check=True,
    )
    reaped = time.time()
    return reaped - float(done.stdout.split()[-1])


def main(rounds: int = 5) -> dict:
    teardown, quick = [], []
    for _ in range(rounds):
        teardown.append(exit_seconds(False))
        quick.append(exit_seconds(True))
    result = {
        "rounds": rounds,
        "teardown_s": [round(s, 3) for s in teardown],
        "quick_exit_s": [round(s, 3) for s in quick],
        "median_teardown_s": round(statistics.median(teardown), 3),
        "median_quick_exit_s": round(statistics.median(quick), 3),
    }
    result["saved_per_process_s"] = round(
        result["median_teardown_s"] - result["median_quick_exit_s"], 3
    )
    return result


if __name__ == "__main__":
    from bench.run import record

    result = main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
    print(json.dumps(result))
    record("process-exit", result, ["-m", "bench.process_exit", *sys.argv[1:2]])
