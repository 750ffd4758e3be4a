"""Class orders and task splits, PILOT's convention (LAMDA-PILOT utils/data_manager.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cl_bench.errors import UserError


def class_order(
    n_classes: int,
    seed: int | None = None,
    explicit: Sequence[int] | None = None,
) -> list[int]:
    """The order in which classes arrive: ``order[i]`` is the original class id
    that becomes label ``i``.

    PILOT: ``np.random.seed(seed); np.random.permutation(n)``. It reseeds numpy's
    global generator on purpose (that is the convention); we use a private
    ``RandomState`` with the same seed, which yields the same permutation without
    touching global state. ``seed=None`` keeps the natural order.
    """
    if explicit is not None:
        order = [int(c) for c in explicit]
        if sorted(order) != list(range(n_classes)):
            raise UserError(
                f"The explicit class order {order[:12]}{'...' if len(order) > 12 else ''} is not "
                f"a permutation of 0..{n_classes - 1}. List every class id of the dataset exactly "
                "once, or use `class_order: seed` for PILOT's seeded permutation."
            )
        return order
    if seed is None:
        return list(range(n_classes))
    return np.random.RandomState(seed).permutation(n_classes).tolist()


def check_split(n_classes: int, init_cls: int, increment: int) -> None:
    """Refuse a split :func:`task_split` cannot make, without building it (the class
    count may be huge where this is checked)."""
    if init_cls < 1 or increment < 1:
        raise UserError(
            f"init_cls ({init_cls}) and increment ({increment}) must both be at least 1. "
            "Set them with --set scenario.init_cls=N --set scenario.increment=M."
        )
    if init_cls > n_classes:
        raise UserError(
            f"init_cls = {init_cls} is larger than the {n_classes} classes of the dataset. "
            f"Use --set scenario.init_cls=N with N <= {n_classes}."
        )


def task_split(n_classes: int, init_cls: int, increment: int) -> list[int]:
    """Number of classes per task: ``init_cls`` first, then ``increment`` each;
    a remainder becomes an extra, smaller last task (Avalanche's generator drops
    it; PILOT keeps it, and so do we)."""
    check_split(n_classes, init_cls, increment)
    full, rest = divmod(n_classes - init_cls, increment)
    return [init_cls] + [increment] * full + ([rest] if rest else [])


def split_in_tasks(n_classes: int, n_tasks: int) -> list[int]:
    """``n_tasks`` tasks over ``n_classes``, as a scenario splits them: ``C // T`` classes
    per task, the first task taking the rest (``init_cls`` = C - (T-1) * (C // T)), e.g.
    10 classes in 3 tasks: 4, 3, 3. ``task_split(C, C // T, C // T)`` would add a smaller
    extra task instead (3, 3, 3, 1: T + 1 tasks)."""
    per_task = n_classes // n_tasks
    return task_split(n_classes, n_classes - (n_tasks - 1) * per_task, per_task)


def tasks_of(sizes: Sequence[int]) -> list[list[int]]:
    """Label positions per task, e.g. [2, 2, 1] -> [[0, 1], [2, 3], [4]]."""
    out, start = [], 0
    for s in sizes:
        out.append(list(range(start, start + s)))
        start += s
    return out
