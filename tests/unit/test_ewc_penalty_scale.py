"""EWC's penalty is added and moves the parameters by as much as its scale says.

At the card's lambda (500) and importance bound (1e-4) the penalty's curvature is at
most 2 lambda importance_max = 0.1 per parameter; at lr 1e-3 with momentum 0.9 it pulls
a parameter back by at most 1e-3 of its drift per step, so on a task of a few steps
EWC follows Finetune within round-off of its predictions (the synthetic scenario's
identical accuracy matrices). With a curvature near 1 / lr the penalty holds the
parameters that mattered for the earlier task. Measured on a random-weight test ViT
(6 blocks, width 64) at 32 px over the small stream's 3 tasks, fp32."""

from __future__ import annotations

import pytest
import torch
from avalanche.core import SupervisedPlugin

from cl_bench.contract import Bookkeeping, drive
from cl_bench.engine.environment import seed_everything
from tests.helpers.strategies import strategy, vit_backbone
from tests.helpers.streams import small_stream

SETTINGS = {"epochs": 5, "batch_size": 8, "eval_batch_size": 8}  # card lr, momentum, decay


class Trajectory(Bookkeeping, SupervisedPlugin):
    """The trained parameters after every task, and EWC's importances and anchor after
    the first (test instrumentation)."""

    def __init__(self) -> None:
        super().__init__()
        self.params: list[dict[str, torch.Tensor]] = []
        self.first: tuple[dict, dict] | None = None

    def after_training_exp(self, strategy, **kwargs) -> None:
        self.params.append({n: p.detach().clone() for n, p in strategy.model.named_parameters()})
        ewc = getattr(strategy, "ewc", None)
        if ewc is not None and self.first is None:
            self.first = (
                {n: d.data.clone() for n, d in ewc.importances[0].items()},
                {n: d.data.clone() for n, d in ewc.saved_params[0].items()},
            )


def trajectory(method: str, backbone, **overrides) -> Trajectory:
    seed_everything(1993)
    traj = Trajectory()
    drive(strategy(method, backbone, 4, [traj], **SETTINGS, **overrides), small_stream())
    return traj


@pytest.fixture(scope="module")
def runs(one_thread) -> dict:
    """EWC at lambda 0 (the same importance passes, so the same random draws, as the
    others; not Finetune, whose loaders draw fewer), at the card's lambda and at 5e6."""
    backbone = vit_backbone("test_vit", 64)
    return {
        "lambda 0": trajectory("ewc", backbone, ewc_lambda=0.0),
        "card": trajectory("ewc", backbone),
        "strong": trajectory("ewc", backbone, ewc_lambda=5e6),
    }


def weighted_drift(params: dict, first: tuple[dict, dict]) -> float:
    """sum F (theta - theta*)^2 with the first task's F and anchor: the penalty / lambda."""
    importances, anchor = first
    return sum(float((importances[n] * (params[n] - anchor[n]).pow(2)).sum()) for n in anchor)


def test_the_penalty_moves_the_parameters_by_its_scale(runs):
    free, card, strong = runs["lambda 0"], runs["card"], runs["strong"]
    for run in (card, strong):  # task 1 has no penalty: the same parameters, F and anchor
        assert all(torch.equal(run.params[0][n], p) for n, p in free.params[0].items())
        assert all(torch.equal(run.first[0][n], f) for n, f in free.first[0].items())
    assert max(float(f.max()) for f in free.first[0].values()) == pytest.approx(1e-4)
    drift = [weighted_drift(run.params[1], free.first) for run in (free, card, strong)]
    assert drift[0] > 0
    # the card's penalty acts (another trajectory) but holds under 1 % of the drift
    assert any(not torch.equal(card.params[1][n], p) for n, p in free.params[1].items())
    assert 0.99 * drift[0] < drift[1] < drift[0]
    # a curvature near 1 / lr holds most of it
    assert drift[2] < 0.1 * drift[0]
