"""Per-task counts carried from the tasks that ran to the end of a long stream.

A method that declares ``repeats_after(params, n_tasks) = k``
(:meth:`cl_bench.contract.Method.repeats_after`) says that from task k + 1 on each
task repeats the one before it; each count of those tasks is then a polynomial of
degree at most :data:`DEGREE` in the task's index. :func:`extend` takes a count
measured on tasks 1 .. k + :data:`RUN_AFTER` (1-based), interpolates it exactly
(rational arithmetic, no rounding) through tasks k + 1 .. k + DEGREE + 1, requires
the interpolant to give the :data:`CHECKS` later measured tasks exactly, and evaluates
it at every task to the stream's end. A count that does not pass the check is not
extended (None): the caller then runs every task.

A count of ``None`` (no training step in that task) extends as ``None`` when every
task from k + 1 that ran has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

DEGREE = 3  # highest degree in the task index (EASE's prototypes: classes x subspaces)
CHECKS = 2  # measured tasks beyond the interpolation points that it must give exactly
RUN_AFTER = DEGREE + 1 + CHECKS  # tasks run after the declared irregular ones


def tasks_to_run(repeats_after: int | None, n_tasks: int) -> int:
    """How many first tasks account runs: all, unless a declared ``repeats_after`` k
    leaves tasks to extend beyond k + :data:`RUN_AFTER`."""
    if repeats_after is None or repeats_after < 0:
        return n_tasks
    return min(n_tasks, repeats_after + RUN_AFTER)


def _interpolate(xs: Sequence[int], ys: Sequence[Fraction], x: int) -> Fraction:
    """The value at ``x`` of the polynomial of degree < len(xs) through (xs, ys)."""
    total = Fraction(0)
    for i, (xi, yi) in enumerate(zip(xs, ys, strict=True)):
        term = Fraction(yi)
        for j, xj in enumerate(xs):
            if j != i:
                term *= Fraction(x - xj, xi - xj)
        total += term
    return total


def extend(measured: Sequence[int | float | None], repeats_after: int, n_tasks: int) -> list | None:
    """``measured`` (tasks 1 .. len(measured)) carried to ``n_tasks`` tasks (module
    docstring), in the type measured (int or float); None when the count does not
    follow one polynomial from task ``repeats_after`` + 1 on."""
    tail = list(measured[repeats_after:])
    if len(tail) < RUN_AFTER:
        raise ValueError(
            f"extending needs {RUN_AFTER} tasks after task {repeats_after}, got {len(tail)}"
        )
    if all(v is None for v in tail):
        return [*measured, *[None] * (n_tasks - len(measured))]
    if any(v is None for v in tail):
        return None
    as_float = any(isinstance(v, float) for v in tail)
    xs = list(range(repeats_after + 1, repeats_after + DEGREE + 2))
    ys = [Fraction(v) for v in tail[: DEGREE + 1]]
    for x, v in zip(range(xs[-1] + 1, len(measured) + 1), tail[DEGREE + 1 :], strict=True):
        if _interpolate(xs, ys, x) != Fraction(v):
            return None
    out = list(measured)
    for x in range(len(measured) + 1, n_tasks + 1):
        value = _interpolate(xs, ys, x)
        if not as_float and value.denominator != 1:
            return None
        out.append(float(value) if as_float else int(value))
    return out
