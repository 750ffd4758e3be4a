"""fp16 training (GPUs without bf16): autocast in float16, the loss scaled for the
backward, each step through the task's GradScaler, a step with an overflowed gradient
skipped; fp32 and bf16 train exactly as Avalanche's own backward and step do. All on
the CPU, which has float16 autocast and a CPU GradScaler (a prompt method on a ViT
under fp16: tests/integration/test_loss_scale.py)."""

from __future__ import annotations

import pytest
import torch
from avalanche.core import SupervisedPlugin
from avalanche.training.templates import SupervisedTemplate
from torch.testing import assert_close

from cl_bench.backbones.base import autocast
from cl_bench.contract import Bookkeeping
from cl_bench.strategies.blocks.loss_scale import LossScaling, loss_scaler
from tests.helpers.strategies import run_tiny

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread

INITIAL_SCALE = 2.0**16  # GradScaler's default


class Steps(Bookkeeping, SupervisedPlugin):
    """Per training step: the task, the scale before and after the step, whether the
    weight moved, and the weight's gradient as the backward left it; with ``poison``
    = (task, epoch, iteration), that step's gradient gets an inf before the step."""

    def __init__(self, poison: tuple[int, int, int] | None = None) -> None:
        super().__init__()
        self.poison, self.rows, self._before = poison, [], None

    def after_backward(self, strategy, **kwargs) -> None:
        clock = strategy.clock
        grad = strategy.model[1].weight.grad
        self.rows.append({"task": clock.train_exp_counter, "grad": grad.clone()})
        if (
            clock.train_exp_counter,
            clock.train_exp_epochs,
            clock.train_epoch_iterations,
        ) == self.poison:
            grad[0, 0] = float("inf")

    def before_update(self, strategy, **kwargs) -> None:
        self._before = strategy.model[1].weight.detach().clone()
        self.rows[-1]["scale"] = scale(strategy)

    def after_update(self, strategy, **kwargs) -> None:
        self.rows[-1]["moved"] = not torch.equal(self._before, strategy.model[1].weight)
        self.rows[-1]["scale_after"] = scale(strategy)


def scale(strategy) -> float | None:
    return None if strategy.scaler is None else strategy.scaler.get_scale()


def weights(s) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in s.model.state_dict().items()}


def test_fp16_autocast_runs_matmuls_in_float16():
    a, b = torch.ones(2, 3), torch.ones(3, 2)
    with autocast("cpu", "fp16"):
        assert (a @ b).dtype == torch.float16
    with autocast("cpu", "bf16"):
        assert (a @ b).dtype == torch.bfloat16
    with autocast("cpu", "fp32"):
        assert (a @ b).dtype == torch.float32


def test_only_fp16_builds_a_scaler():
    assert isinstance(loss_scaler("cpu", "fp16"), torch.amp.GradScaler)
    assert loss_scaler(torch.device("cpu"), "bf16") is None
    assert loss_scaler("cpu", "fp32") is None


def test_fp16_steps_through_a_fresh_scaler_per_task_and_skips_an_overflowed_step():
    """Task 1, epoch 1, iteration 2 gets an inf gradient: that step leaves the weight
    as it was and halves the scale. Every step is skipped exactly when its scale backs
    off (the first steps of a task may overflow on their own: the summed gradients of
    this unnormalised linear layer come close to fp16's largest value at 2^16), and
    each task starts with a fresh scaler at 2^16 (the optimizer is rebuilt per task)."""
    steps = Steps(poison=(0, 0, 1))
    s = run_tiny("fp16", [steps])
    assert len(steps.rows) == 2 * (4 + 2 + 2)  # 2 epochs of 16, 8 and 8 images, batch 4
    poisoned = steps.rows[1]
    assert not poisoned["moved"] and poisoned["scale_after"] == poisoned["scale"] / 2
    for row in steps.rows:
        assert row["moved"] == (row["scale_after"] == row["scale"])
        assert row["scale_after"] in (row["scale"], row["scale"] / 2)
    assert sum(r["moved"] for r in steps.rows) >= 12
    firsts = [next(r for r in steps.rows if r["task"] == t) for t in range(3)]
    assert [r["scale"] for r in firsts] == [INITIAL_SCALE] * 3
    assert all(torch.isfinite(w).all() for w in weights(s).values())


def test_fp16_gradients_are_the_scaled_fp32_gradients():
    """The first backward, from the same weights and batch: fp16's gradient is 2^16
    times fp32's, up to fp16's rounding."""
    fp16, fp32 = Steps(), Steps()
    run_tiny("fp16", [fp16], epochs=1)
    run_tiny("fp32", [fp32], epochs=1)
    assert fp32.rows[0]["scale"] is None
    assert_close(
        fp16.rows[0]["grad"] / INITIAL_SCALE, fp32.rows[0]["grad"], rtol=1e-2, atol=1e-3
    )  # fp16 rounds the pixels and the logits


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fp32_and_bf16_train_bit_for_bit_as_avalanche_does(precision, monkeypatch):
    """No scaler exists outside fp16, and the training equals, bit for bit, one with
    Avalanche's own backward and step in place of the mixin's."""
    s = run_tiny(precision, epochs=1)
    assert s.scaler is None
    monkeypatch.setattr(LossScaling, "backward", SupervisedTemplate.backward)
    monkeypatch.setattr(LossScaling, "optimizer_step", SupervisedTemplate.optimizer_step)
    plain = run_tiny(precision, epochs=1)
    for name, value in weights(s).items():
        assert torch.equal(value, plain.model.state_dict()[name]), name
