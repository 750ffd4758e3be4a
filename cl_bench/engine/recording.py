"""Avalanche plugin recording the accuracy matrix, routing and time per phase.

Avalanche's accuracy metrics report per-experience numbers and a stream
average; we need per-sample predictions on the seen-classes test set to fill
a whole row of the matrix from one evaluation pass, so we collect them here.
"""

from __future__ import annotations

import time

import torch
from avalanche.core import SupervisedPlugin

from cl_bench import progress
from cl_bench.accounting.count import stored_params, trainable_params
from cl_bench.backbones.base import Backbone
from cl_bench.contract import Bookkeeping, Schedule, Stateful


def percent(hits: torch.Tensor) -> float:
    """100 * share of True, from exact integer counts (no float32 rounding)."""
    return 100.0 * int(hits.sum()) / hits.numel()


class Recorder(Bookkeeping, Stateful, SupervisedPlugin):
    """Fills ``acc_matrix``, ``acc_seen``, ``routing_acc`` (from the strategy's
    :meth:`~cl_bench.contract.Method.routing`), timings and the per-task parameter
    counts while the strategy trains and evaluates. Bookkeeping: not part of what the
    method stores (see accounting.stored_params)."""

    state_attrs = (
        "acc_matrix",
        "acc_seen",
        "routing_acc",
        "train_s",
        "eval_s",
        "trainable",
        "stored",
    )

    def __init__(
        self,
        task_of_label: torch.Tensor,
        backbone: Backbone | None = None,
        label: str = "",
        progress: bool = True,
    ) -> None:
        super().__init__()
        self.task_of_label, self.backbone = task_of_label, backbone
        self.label, self.progress = label, progress
        self.acc_matrix: list[list[float]] = []
        self.acc_seen: list[float] = []
        self.routing_acc: list[float | None] = []
        self.train_s: list[float] = []
        self.eval_s: list[float] = []
        self.trainable: list[int] = []
        self.stored: list[int] = []
        self._bar = None

    def before_training_exp(self, strategy, **kwargs) -> None:
        self._t0 = time.perf_counter()
        self.trainable.append(trainable_params(strategy))
        i, n = strategy.experience.current_experience, len(self.task_of_label.unique())
        total = strategy.train_epochs * len(strategy.dataloader)
        joint = getattr(getattr(strategy, "spec", None), "schedule", None) is Schedule.JOINT
        label = f"{self.label} task {i + 1}/{n}"
        label = f"{self.label} trained on all {n} tasks at once" if joint else label
        self._task = progress.enter_task(label, self.progress)
        self._bar = progress.bar(
            total=total,
            desc=label,
            unit="it",
            enabled=self.progress and total > 0,
        )

    def after_training_iteration(self, strategy, **kwargs) -> None:
        self._bar.update(1)
        if self._bar.n % 20 == 0:
            self._bar.set_postfix(loss=f"{float(strategy.loss.detach()):.3f}")

    def after_training_exp(self, strategy, **kwargs) -> None:
        self._bar.close()
        progress.leave_task(self._task)
        self.train_s.append(time.perf_counter() - self._t0)
        self.stored.append(stored_params(strategy, self.backbone))

    def before_eval_exp(self, strategy, **kwargs) -> None:
        """One array per field for the whole evaluation, filled batch by batch: small
        tensors kept per batch between the batches' large image buffers fragment the
        C heap, and the process grew with every batch, which a run's recorded peak
        memory would have counted (bench figure default-run-memory)."""
        self._t0 = time.perf_counter()
        n = len(strategy.experience.dataset)
        self._pred, self._y = (torch.empty(n, dtype=torch.long) for _ in range(2))
        self._route: torch.Tensor | None = None
        self._done = 0

    def after_eval_iteration(self, strategy, **kwargs) -> None:
        rows = slice(self._done, self._done + len(strategy.mb_y))
        self._pred[rows] = strategy.mb_output.argmax(1).cpu()
        self._y[rows] = strategy.mb_y.cpu()
        routing = strategy.routing()
        if routing is not None:
            if self._route is None:
                self._route = torch.empty(len(self._y), dtype=torch.long)
            self._route[rows] = routing.cpu()
        self._done = rows.stop

    def after_eval_exp(self, strategy, **kwargs) -> None:
        if self._done != len(self._y):
            raise RuntimeError(
                f"the evaluation's batches held {self._done} samples of {len(self._y)}"
            )
        pred, y = self._pred, self._y
        task = self.task_of_label[y]
        correct = pred == y
        step = int(task.max())
        self.acc_matrix.append([percent(correct[task == j]) for j in range(step + 1)])
        self.acc_seen.append(percent(correct))
        self.routing_acc.append(percent(self._route == task) if self._route is not None else None)
        self.eval_s.append(time.perf_counter() - self._t0)
