"""Counts carried from the tasks that ran to the end of a long stream
(cl_bench.accounting.extend): exact where a count is a polynomial of degree <= 3 in
the task index after the declared first tasks, refused where it is not."""

from __future__ import annotations

from cl_bench.accounting.extend import RUN_AFTER, extend, tasks_to_run


def stored(t: int) -> int:
    """EASE-like: an adapter set per task plus classes x subspaces x d prototypes
    (2 classes a task, d = 4), after a first task of its own."""
    return 1000 if t == 1 else 7 + 100 * t + 2 * t * 4 * t


def test_runs_the_declared_tasks_and_six_more():
    assert RUN_AFTER == 6
    assert tasks_to_run(None, 300) == 300
    assert tasks_to_run(1, 300) == 7
    assert tasks_to_run(10, 300) == 16
    assert tasks_to_run(1, 5) == 5


def test_a_quadratic_count_is_carried_exactly():
    measured = [stored(t) for t in range(1, 8)]
    out = extend(measured, 1, 300)
    assert out == [stored(t) for t in range(1, 301)]
    assert all(isinstance(v, int) for v in out)


def test_a_cubic_count_is_carried_exactly():
    def cubic(t: int) -> int:
        return t**3 - 4 * t**2 + 9

    out = extend([cubic(t) for t in range(1, 8)], 1, 50)
    assert out == [cubic(t) for t in range(1, 51)]


def test_floats_stay_floats_and_exact():
    per_sample = [68_768_354_304.0 + 0.5 * t * t for t in range(1, 8)]
    out = extend(per_sample, 1, 20)
    assert out[-1] == 68_768_354_304.0 + 0.5 * 400
    assert all(isinstance(v, float) for v in out)


def test_a_count_that_changes_within_the_checked_tasks_is_not_carried():
    """A pool of 5 prompts: tasks 1-5 use their own, later ones share (the line
    through tasks 2-5 misses tasks 6 and 7)."""
    measured = [10 * min(t, 5) for t in range(1, 8)]
    assert extend(measured, 1, 300) is None


def test_a_count_off_the_fit_at_the_last_check_alone_is_refused():
    measured = [9, 0, 0, 0, 0, 0, 1]
    assert extend(measured, 1, 10) is None


def test_no_training_step_extends_as_none_and_a_mix_is_refused():
    assert extend([5.0, *[None] * 6], 1, 9) == [5.0, *[None] * 8]
    assert extend([5.0, None, 3.0, None, 3.0, None, 3.0], 1, 9) is None
