"""The EWC parity row's own arithmetic (bench/parity/methods/ewc/row.py: ``fisher``,
``penalty``) beside cl-bench's TrainableEWCPlugin on a tiny linear model: the Fisher
is the mean over minibatches of squared minibatch-mean gradients, the penalty
lambda sum F (theta - theta*)^2 without a 1/2, and ``importance_max`` clamps the
importances elementwise. Needs neither Avalanche's checkout nor the peer venv."""

from __future__ import annotations

import types

import pytest
import torch
from avalanche.benchmarks.utils.classification_dataset import (
    _make_taskaware_tensor_classification_dataset as tensor_dataset,
)
from torch import nn

from bench.parity.methods.ewc import row
from cl_bench.strategies.ewc import TrainableEWCPlugin


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    x, y = torch.randn(10, 5), torch.randint(0, 3, (10,))
    return model, x, y


def test_fisher_is_the_plugins_importances(setup):
    model, x, y = setup
    ours = row.fisher(model, x, y, batch=4)  # batches of 4, 4, 2
    plugin = TrainableEWCPlugin(1.0, "online", 1.0, None)
    got = plugin.compute_importances(
        model,
        nn.CrossEntropyLoss(),
        torch.optim.SGD(model.parameters(), lr=0.1),
        tensor_dataset(x, y, task_labels=0, targets=y),
        "cpu",
        4,
    )
    for name, imp in got.items():
        torch.testing.assert_close(imp.data, ours[name], rtol=0, atol=0)
    # the same from first principles: mean over the 3 minibatches of squared gradients
    grads = []
    for i in range(0, 10, 4):
        model.zero_grad()
        nn.functional.cross_entropy(model(x[i : i + 4]), y[i : i + 4]).backward()
        grads.append(model[0].weight.grad.clone() ** 2)
    torch.testing.assert_close(ours["0.weight"], sum(grads) / 3)


def test_bound_clamps_each_importance(setup):
    model, x, y = setup
    free = row.fisher(model, x, y, batch=4)
    bound = float(free["0.weight"].median())
    plugin = TrainableEWCPlugin(1.0, "online", 1.0, bound)
    got = plugin.compute_importances(
        model,
        nn.CrossEntropyLoss(),
        torch.optim.SGD(model.parameters(), lr=0.1),
        tensor_dataset(x, y, task_labels=0, targets=y),
        "cpu",
        4,
    )
    torch.testing.assert_close(got["0.weight"].data, free["0.weight"].clamp(max=bound))


def test_penalty_is_lambda_times_the_weighted_square_without_a_half(setup, monkeypatch):
    model, x, y = setup
    monkeypatch.setitem(row.EWC, "ewc_lambda", 3.0)
    importances = row.fisher(model, x, y, batch=5)
    anchor = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        model[2].bias += 0.5
    want = 3.0 * float((importances["2.bias"] * 0.25).sum())
    assert row.penalty(model, importances, anchor) == pytest.approx(want, rel=1e-6)
    # the plugin's before_backward adds the same to the loss
    plugin = TrainableEWCPlugin(3.0, "online", 1.0, None)
    plugin.importances[0] = {
        n: types.SimpleNamespace(data=v, expand=v.expand) for n, v in importances.items()
    }
    plugin.saved_params[0] = {n: types.SimpleNamespace(expand=v.expand) for n, v in anchor.items()}
    strategy = types.SimpleNamespace(
        clock=types.SimpleNamespace(train_exp_counter=1),
        device="cpu",
        model=model,
        loss=torch.tensor(0.0),
    )
    plugin.before_backward(strategy)
    assert float(strategy.loss.detach()) == pytest.approx(want, rel=1e-6)


def test_ewc_vs_finetune_is_a_paired_interval_per_side_over_the_seeds_with_both():
    def run(seed, ours, ref, fine=None):
        r = {"seed": seed, "ours": {"curve": ours}, "reference": {"curve": ref}}
        if fine:
            r["finetune"] = {"ours": {"curve": fine[0]}, "reference": {"curve": fine[1]}}
        return r

    per_seed = [
        run(1, [80.0, 40.0], [80.0, 42.0], ([80.0, 30.0], [80.0, 36.0])),
        run(2, [90.0, 50.0], [90.0, 44.0], ([90.0, 46.0], [90.0, 40.0])),
        run(3, [70.0, 30.0], [70.0, 30.0]),
    ]
    gap = row.extra(per_seed)["ewc_vs_finetune"]
    assert gap["seeds"] == [1, 2]
    # ours: last differences 10, 4 -> mean 7, sd 4.2426, t(0.975, 1) = 12.7062
    half = 12.706205 * 4.242641 / 2**0.5
    assert gap["ours"]["last"]["mean_diff"] == pytest.approx(7.0)
    assert gap["ours"]["last"]["ci95"] == pytest.approx([7 - half, 7 + half], abs=1e-4)
    assert gap["ours"]["avg"]["mean_diff"] == pytest.approx(3.5)
    assert (gap["reference"]["last"]["ewc_mean"], gap["reference"]["last"]["finetune_mean"]) == (
        43.0,
        38.0,
    )
    assert row.extra(per_seed[2:]) == {}
