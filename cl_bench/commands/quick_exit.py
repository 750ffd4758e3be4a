"""Leave the process without tearing the interpreter down.

After importing torch, timm and Avalanche, CPython's own shutdown (clearing every
module and freeing its objects one by one) is a noticeable share of a short command's
time, paid by every `cl-bench` process: the default run, each command a test starts,
each run killed and resumed (bench/figures.yaml, figure process-exit, measures it). Nothing in it
is work of ours: results, checkpoints and feature files are written atomically and
closed before a command returns. So the entry point does what shutdown does before its
teardown, in its order (`threading._shutdown`: executors' threads woken and every
non-daemon thread joined; the `atexit` handlers: logging, multiprocessing, temporary
folders; the standard streams flushed) and then ends the process with `os._exit`.

Under a profiler or a tracer (cProfile, pdb, coverage's trace function) the normal
shutdown is kept, so that what they write at the end is written.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def status_of(code: object) -> int:
    """The exit status `sys.exit(code)` gives: None -> 0, an int as is, anything else
    printed to stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def exit_quickly(code: object) -> NoReturn:
    """``sys.exit(code)``, without the interpreter's teardown (see the module)."""
    if sys.gettrace() is not None or sys.getprofile() is not None:
        sys.exit(code)
    status = status_of(code)
    threading._shutdown()  # as shutdown: wakes executors' threads, joins non-daemon ones
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`cl-bench report | head`)
            pass
    os._exit(status & 0xFF)
