"""Progress for long work: a live tqdm bar on a terminal; plain lines where stderr is
not a terminal (a SLURM job's log, ``make run > log``), where a bar would be thousands
of carriage-return frames. A plain line is written when the work ends and, while it
runs, at most every ``CL_BENCH_PROGRESS_EVERY_S`` seconds (default 60)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar, Token

from tqdm.auto import tqdm

EVERY_S = 60.0


def every_s() -> float:
    raw = os.environ.get("CL_BENCH_PROGRESS_EVERY_S", "")
    try:
        return max(float(raw), 0.0) if raw else EVERY_S
    except ValueError:
        return EVERY_S


class PlainProgress:
    """The part of tqdm's interface cl-bench uses (``update``, ``set_postfix``,
    ``close``, ``n``, iteration), written as a few whole lines."""

    def __init__(
        self,
        iterable: Iterable | None,
        total: int | None,
        desc: str,
        unit: str,
        stream=None,
        clock=time.monotonic,
    ):
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.stream, self.clock = stream, clock
        self.n, self.postfix, self.closed = 0, "", False
        self.start = self.last = clock()
        self.every = every_s()

    def _write(self, what: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        tail = f" ({self.postfix})" if self.postfix else ""
        stream.write(f"{self.desc}: {what}{tail}\n")
        stream.flush()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            of = f"/{self.total}" if self.total else ""
            self._write(f"{self.n}{of} {self.unit} after {now - self.start:.0f} s")

    def set_postfix(self, **values) -> None:
        self.postfix = ", ".join(f"{k} {v}" for k, v in values.items())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.n:
            self._write(f"{self.n} {self.unit} in {self.clock() - self.start:.1f} s")

    def __iter__(self) -> Iterator:
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()


def bar(
    iterable: Iterable | None = None,
    *,
    total: int | None,
    desc: str,
    unit: str,
    enabled: bool = True,
):
    """A progress display for ``total`` units of work: nothing when not ``enabled``."""
    if not enabled:
        return tqdm(iterable, total=total, disable=True)
    if sys.stderr.isatty():
        return tqdm(iterable, total=total, desc=desc, unit=unit, leave=False)
    return PlainProgress(iterable, total, desc, unit)


# The training task in progress (set by the run's recorder): its label, e.g. "ranpac task
# 1/5", and whether progress is shown. Work a method does inside a task that is no
# training iteration (a classifier fit over the task's features) shows its bar under it.
_TASK: ContextVar[tuple[str, bool]] = ContextVar("cl_bench_task", default=("", False))


def enter_task(label: str, enabled: bool) -> Token[tuple[str, bool]]:
    """Mark the task ``label`` as in progress; :func:`leave_task` with the token ends it."""
    return _TASK.set((label, enabled))


def leave_task(token: Token[tuple[str, bool]]) -> None:
    _TASK.reset(token)


def task_bar(iterable: Iterable | None = None, *, total: int | None, what: str, unit: str):
    """A bar for work inside the task in progress, named ``<task label>: <what>``; shown
    only when the task's progress is (nothing outside a run's task)."""
    label, enabled = _TASK.get()
    return bar(iterable, total=total, desc=f"{label}: {what}", unit=unit, enabled=enabled)
