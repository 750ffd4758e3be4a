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

What is watched, at the cost of one device sync each:

* the training loss of every iteration (before its backward pass);
* the trainable parameters at the end of every epoch (one reduction over all of
  them): a step can turn a weight to inf while the loss that caused it was finite;
* the logits of every evaluation batch. Methods mask classes that may not be
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
    return {k: v for k, v in params.items()
            if (k == "lr" or k.endswith("_lr")) and isinstance(v, float)}


def all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every value of every tensor is finite, with one sync for all of them."""
    if not tensors:
        return True
    return bool(torch.stack([torch.isfinite(t.detach()).all() for t in tensors]).all())


def logits_valid(logits: torch.Tensor) -> bool:
    """No NaN, no ``+inf``, and a finite maximum in every row (``-inf`` masks a class)."""
    logits = logits.detach().float()
    if logits.numel() == 0:
        return True
    bad = torch.isnan(logits).any() | torch.isposinf(logits).any()
    return not bool(bad | ~torch.isfinite(logits.max(dim=-1).values).all())


class FiniteWatch(Bookkeeping, SupervisedPlugin):
    """Fails the run at the first non-finite loss, weight or evaluation logit (see the
    module docstring). ``method``, ``params`` and ``defaults``: the card's name, settings
    and defaults, for the message. Bookkeeping: it keeps nothing the method stores."""

    def __init__(self, method: str, params: dict, defaults: dict | None = None) -> None:
        super().__init__()
        self.method, self.params, self.defaults = method, params, defaults or {}

    def before_backward(self, strategy, **kwargs) -> None:
        if not all_finite([strategy.loss]):
            self.fail(strategy, f"the training loss became {float(strategy.loss.detach())}")

    def after_training_epoch(self, strategy, **kwargs) -> None:
        trainable = [p for p in strategy.model.parameters() if p.requires_grad]
        if not all_finite(trainable):
            self.fail(strategy, "a trained weight became inf or NaN at the end of the epoch")

    def after_eval_forward(self, strategy, **kwargs) -> None:
        if not logits_valid(strategy.mb_output):
            task = getattr(strategy.experience, "current_experience", None)
            after = f"after training task {task + 1}" if task is not None else "at the end"
            raise UserError(
                f"{self.method} produced non-finite predictions (NaN or +inf logits, or an "
                f"image with no finite logit) when evaluated {after}, so its accuracy would "
                f"not be a result. {self.cause()} Nothing was saved as a result; the failure "
                "is recorded in the run's .failed file.")

    def fail(self, strategy, what: str) -> None:
        task = getattr(strategy.experience, "current_experience", None)
        where = "in the joint training" if task is None else f"in task {task + 1}"
        epoch = strategy.clock.train_exp_epochs + 1
        step = strategy.clock.train_epoch_iterations + 1
        raise UserError(
            f"{self.method} diverged: {what} {where}, epoch {epoch} (iteration {step}). "
            f"{self.cause()} Nothing was saved as a result; the failure is recorded in the "
            "run's .failed file.")

    def cause(self) -> str:
        """The likely cause, naming the learning rates and how to lower them."""
        rates = learning_rates(self.params)
        if not rates:
            return ("The likely cause is a setting that scales the updates or the loss too "
                    "far; check the values given with --set.")
        named = ", ".join(f"{self.method}.{k} = {v:g}" + (
            f" (the card's default: {self.defaults[k]:g})" if k in self.defaults else "")
            for k, v in rates.items())
        return (f"The likely cause is a learning rate too large ({named}): lower it with "
                "--set, or lower another setting that scales the updates (momentum, a loss "
                "weight).")
