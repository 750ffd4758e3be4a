"""``cl-bench`` in a process that SIGKILLs itself right after the checkpoint of task K
(0-based) is written, through the checkpoint's ``SAVED`` callbacks:
``python -m tests.helpers.killed_run K run --out ...``."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

from cl_bench.commands.cli import main
from cl_bench.engine import checkpoint


def kill_after(task: int) -> Callable[[int], None]:
    """A ``SAVED`` callback that SIGKILLs this process once task ``task`` is saved."""

    def saved(done: int) -> None:
        if done - 1 == task:
            os.kill(os.getpid(), signal.SIGKILL)

    return saved


if __name__ == "__main__":
    checkpoint.SAVED.append(kill_after(int(sys.argv.pop(1))))
    sys.argv[0] = "cl-bench"
    main()
