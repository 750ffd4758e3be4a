"""Accuracy matrix -> the summary numbers, in percent.

A[i][j] is the accuracy on task j's test set after training task i (j <= i);
``acc_seen[i]`` is top-1 over all test images of the classes seen by task i.
PILOT convention (sample-weighted): average = mean of ``acc_seen``, last = its
final value. Mammoth convention (task-mean): mean over j of A[i][j], then the
mean over i. Forgetting (Chaudhry et al.): for every task but the last, the
best earlier accuracy minus the final one, averaged. BWT (Lopez-Paz &
Ranzato): mean of A[T-1][j] - A[j][j] over j < T-1.
"""

from __future__ import annotations

from collections.abc import Sequence


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def summarize(acc_matrix: Sequence[Sequence[float]], acc_seen: Sequence[float]) -> dict:
    """The metric block of a result file (all in percent; forgetting and BWT
    are None for a single task)."""
    task_mean = [_mean(row) for row in acc_matrix]
    last = acc_matrix[-1]
    earlier = range(len(acc_matrix) - 1)
    forgetting = bwt = None
    if len(acc_matrix) > 1:
        forgetting = _mean(
            [
                max(acc_matrix[i][j] for i in range(j, len(acc_matrix) - 1)) - last[j]
                for j in earlier
            ]
        )
        bwt = _mean([last[j] - acc_matrix[j][j] for j in earlier])
    return {
        "avg_acc": _mean(acc_seen),
        "last_acc": acc_seen[-1],
        "acc_task_mean": task_mean,
        "avg_acc_task_mean": _mean(task_mean),
        "last_acc_task_mean": task_mean[-1],
        "forgetting": forgetting,
        "bwt": bwt,
    }
