"""Work inside a training task that is no training iteration (a first-session method's
classifier fit) shows a bar named after the task, and nothing outside a run's task."""

from __future__ import annotations

from cl_bench import progress


def test_a_bar_inside_a_task_is_named_after_the_task(capsys, monkeypatch):
    monkeypatch.setenv("CL_BENCH_PROGRESS_EVERY_S", "0")
    token = progress.enter_task("ranpac task 1/5", True)
    try:
        items = list(
            progress.task_bar(
                range(3), total=3, what="features for the classifier fit", unit="batch"
            )
        )
    finally:
        progress.leave_task(token)
    assert items == [0, 1, 2]
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" after ")[0].split(" in ")[0] for line in lines] == [
        "ranpac task 1/5: features for the classifier fit: 1/3 batch",
        "ranpac task 1/5: features for the classifier fit: 2/3 batch",
        "ranpac task 1/5: features for the classifier fit: 3/3 batch",
        "ranpac task 1/5: features for the classifier fit: 3 batch",
    ]


def test_no_bar_outside_a_task_or_with_progress_off(capsys, monkeypatch):
    monkeypatch.setenv("CL_BENCH_PROGRESS_EVERY_S", "0")
    assert list(progress.task_bar(range(2), total=2, what="x", unit="batch")) == [0, 1]
    token = progress.enter_task("ranpac task 1/5", False)
    try:
        assert list(progress.task_bar(range(2), total=2, what="x", unit="batch")) == [0, 1]
    finally:
        progress.leave_task(token)
    assert capsys.readouterr().err == ""
