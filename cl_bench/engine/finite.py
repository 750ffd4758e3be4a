"""Finite or failed: the watch that stops a diverged run before it is saved as a result.

A learning rate that makes training diverge does not crash anything: the loss turns
to inf or NaN, the weights follow, every prediction becomes the same class, and the
run would be written as a finished result (10 % accuracy on 10 classes) that a sweep
report then ranks beside real ones. :class:`FiniteWatch` is added to every run's
strategy by the runner, so every method (and a plain Avalanche strategy) trains
under it, at the one depth all of them share: Avalanche's plugin hooks. The first
non-finite value fails the run with a :class:`UserError` naming the method, task,
epoch and the likely cause; :func:`cl_bench.store.results.run_once` records it in
the run's ``.failed`` file, and no result is written.

What is watched, on the device, with one host sync per training epoch and one per
evaluated experience (not one per batch: at a batch of 16 to 48 on a GPU, a sync at
every step makes Python wait for the GPU and the GPU for Python):

* the training loss of every iteration (before its backward pass): the index of the
  epoch's first non-finite loss, and that loss, are kept in device tensors
  (:class:`FirstNonFinite`) and read at the end of the epoch, so the run fails naming
  the first non-finite iteration; the iterations after it run on, on whatever weights
  it left, until the epoch ends (the run fails anyway, and nothing is saved);
* the trainable parameters at the end of every epoch (one reduction over all of
  them, read back with the losses' record): a step can turn a weight to inf while
  the loss that caused it was finite;
* the logits of every evaluation batch, reduced on the device to one flag per
  evaluated experience and read at its end. Methods mask classes that may not be
  predicted with ``-inf`` (EASE, MOS, the prompt methods), so a logit may be
  ``-inf``; NaN and ``+inf`` may not, and every row must have a finite maximum
  (a row of ``-inf`` predicts nothing). This also covers methods that fit their
  classifier in closed form (SimpleCIL's prototypes, RanPAC's ridge solution).
"""

from __future__ import annotations

import torch
from avalanche.core import SupervisedPlugin

from cl_bench.contract import Bookkeeping
from cl_bench.errors import UserError


def learning_rates(params: dict) -> dict[str, float]:
    """The settings of a method that are learning rates (``lr``, ``ca_lr``, ...)."""
    return {
        k: v for k, v in params.items() if (k == "lr" or k.endswith("_lr")) and isinstance(v, float)
    }


def to_host(t: torch.Tensor) -> list | bool | int | float:
    """``t`` read back to the host: the watch's only device-to-host transfer, the one
    place where it waits for the GPU."""
    return t.tolist()


def all_finite(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Whether every value of every tensor is finite: a 0-d bool on their device,
    computed without a sync (``bool()`` of it is one)."""
    if not tensors:
        return torch.ones((), dtype=torch.bool)
    return torch.stack([torch.isfinite(t.detach()).all() for t in tensors]).all()


def logits_valid(logits: torch.Tensor) -> torch.Tensor:
    """No NaN, no ``+inf``, and a finite maximum in every row (``-inf`` masks a class):
    a 0-d bool on the logits' device, computed without a sync."""
    logits = logits.detach().float()
    if logits.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=logits.device)
    bad = torch.isnan(logits).any() | torch.isposinf(logits).any()
    return ~(bad | ~torch.isfinite(logits.max(dim=-1).values).all())


class FirstNonFinite:
    """The first iteration of an epoch whose loss was not finite, and that loss, held
    on the loss's device and updated at every iteration with ``torch.where`` (no sync);
    ``index`` is -1 while every loss was finite."""

    def __init__(self, loss: torch.Tensor) -> None:
        self.index = torch.full((), -1, dtype=torch.long, device=loss.device)
        self.value = torch.zeros((), device=loss.device)

    def see(self, iteration: int, loss: torch.Tensor) -> None:
        loss = loss.detach().float().reshape(())
        first = (self.index < 0) & ~torch.isfinite(loss)
        self.index = torch.where(first, iteration, self.index)
        self.value = torch.where(first, loss, self.value)


class FiniteWatch(Bookkeeping, SupervisedPlugin):
    """Fails the run at the first non-finite loss, weight or evaluation logit (see the
    module docstring). ``method``, ``params`` and ``defaults``: the card's name, settings
    and defaults, for the message. Bookkeeping: it keeps nothing the method stores."""

    def __init__(self, method: str, params: dict, defaults: dict | None = None) -> None:
        super().__init__()
        self.method, self.params, self.defaults = method, params, defaults or {}
        self.losses: FirstNonFinite | None = None  # this epoch's, from its first iteration
        self.predictions: torch.Tensor | None = None  # this evaluation's: all valid so far

    def before_training_epoch(self, strategy, **kwargs) -> None:
        self.losses = None

    def before_backward(self, strategy, **kwargs) -> None:
        if self.losses is None:
            self.losses = FirstNonFinite(strategy.loss)
        self.losses.see(strategy.clock.train_epoch_iterations, strategy.loss)

    def after_training_epoch(self, strategy, **kwargs) -> None:
        """The epoch's one sync: its first non-finite loss and the weights' check,
        read back together."""
        trainable = [p for p in strategy.model.parameters() if p.requires_grad]
        read = [] if self.losses is None else [self.losses.index, self.losses.value]
        if trainable:
            read.append(all_finite(trainable))
        if not read:
            return
        values = to_host(torch.stack([t.double() for t in read]))
        if self.losses is not None and values[0] >= 0:
            self.fail(strategy, f"the training loss became {values[1]}", int(values[0]) + 1)
        if trainable and not values[-1]:
            self.fail(
                strategy,
                "a trained weight became inf or NaN at the end of the epoch",
                strategy.clock.train_epoch_iterations + 1,
            )

    def before_eval_exp(self, strategy, **kwargs) -> None:
        self.predictions = None

    def after_eval_forward(self, strategy, **kwargs) -> None:
        valid = logits_valid(strategy.mb_output)
        self.predictions = valid if self.predictions is None else self.predictions & valid

    def after_eval_exp(self, strategy, **kwargs) -> None:
        """The evaluation's one sync: whether every batch's logits were valid."""
        if self.predictions is None or to_host(self.predictions):
            return
        task = getattr(strategy.experience, "current_experience", None)
        after = f"after training task {task + 1}" if task is not None else "at the end"
        raise UserError(
            f"{self.method} produced non-finite predictions (NaN or +inf logits, or an "
            f"image with no finite logit) when evaluated {after}, so its accuracy would "
            f"not be a result. {self.cause()} Nothing was saved as a result; the failure "
            "is recorded in the run's .failed file."
        )

    def fail(self, strategy, what: str, iteration: int) -> None:
        task = getattr(strategy.experience, "current_experience", None)
        where = "in the joint training" if task is None else f"in task {task + 1}"
        epoch = strategy.clock.train_exp_epochs + 1
        raise UserError(
            f"{self.method} diverged: {what} {where}, epoch {epoch} (iteration {iteration}). "
            f"{self.cause()} Nothing was saved as a result; the failure is recorded in the "
            "run's .failed file."
        )

    def cause(self) -> str:
        """The likely cause, naming the learning rates and how to lower them."""
        rates = learning_rates(self.params)
        if not rates:
            return (
                "The likely cause is a setting that scales the updates or the loss too "
                "far; check the values given with --set."
            )
        named = ", ".join(
            f"{self.method}.{k} = {v:g}"
            + (f" (the card's default: {self.defaults[k]:g})" if k in self.defaults else "")
            for k, v in rates.items()
        )
        return (
            f"The likely cause is a learning rate too large ({named}): lower it with "
            "--set, or lower another setting that scales the updates (momentum, a loss "
            "weight)."
        )
