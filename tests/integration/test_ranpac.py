"""RanPAC: the incremental ridge solution is the batch one on all data seen so far,
lambda is chosen as the official code chooses it, the accounting counts what the
method keeps, a killed run resumes exactly, and it learns on fmnist."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from cl_bench.strategies.blocks.ridge import (
    CANDIDATES,
    choose_ridge,
    ridge_losses,
    ridge_losses_float32,
    solve_ridge,
)
from cl_bench.strategies.ranpac import split_order
from tests.helpers.cli import invoke
from tests.helpers.strategies import toy_ranpac

TINY = [
    "--scenario",
    "synthetic",
    "--backbone",
    "vit_tiny_patch16_224",
    "--weights",
    "random",
    "--image-size",
    "32",
    "--precision",
    "fp32",
    "--no-progress",
]


def official_choice(h: torch.Tensor, y: torch.Tensor) -> float:
    """The official procedure, literally: one solve per candidate on the first 80%,
    MSE on the rest, first argmin."""
    n = int(h.shape[0] * 0.8)
    g, q = h[:n].T @ h[:n], h[:n].T @ y[:n]
    losses = [
        float(
            ((h[n:] @ torch.linalg.solve(g + lam * torch.eye(g.shape[0]), q)) - y[n:]).pow(2).mean()
        )
        for lam in CANDIDATES
    ]
    return CANDIDATES[losses.index(min(losses))]


def test_incremental_solution_equals_the_batch_solution_on_all_data_seen():
    strategy = toy_ranpac(m=40)
    net = strategy.model
    gen = torch.Generator().manual_seed(1)
    xs, ys = [], []
    for task, classes in enumerate(([0, 1], [2, 3], [4, 5])):
        x = torch.randn(30, 6, generator=gen) + 2 * task
        y = torch.tensor(classes).repeat(15)
        strategy.fit(x, y)
        xs.append(x)
        ys.append(y)
        h = F.relu(torch.cat(xs).double() @ net.W_rand.double())
        onehot = F.one_hot(torch.cat(ys), 2 * (task + 1)).double()
        lam = strategy.ridges[-1]
        batch = torch.linalg.solve(
            h.T @ h + lam * torch.eye(40, dtype=torch.float64), h.T @ onehot
        ).T
        assert net.W_o.shape == (2 * (task + 1), 40)
        assert torch.allclose(net.W_o, batch, rtol=1e-9, atol=1e-12 * float(batch.abs().max()))
        assert torch.equal(net.G, h.T @ h) or torch.allclose(net.G, h.T @ h, rtol=1e-12)
    assert len(strategy.ridges) == 3 and all(lam in CANDIDATES for lam in strategy.ridges)


@pytest.mark.parametrize("n, m", [(50, 200), (400, 30)])  # dual (n_fit <= M) and primal
def test_ridge_choice_matches_the_official_procedure(n, m):
    gen = torch.Generator().manual_seed(n)
    h = F.relu(torch.randn(n, m, generator=gen, dtype=torch.float64))
    w = torch.randn(m, 3, generator=gen, dtype=torch.float64)
    y = h @ w + 3.0 * torch.randn(n, 3, generator=gen, dtype=torch.float64)
    assert choose_ridge(h, y) == official_choice(h, y)


def test_ridge_choice_on_a_constructed_case():
    """Fit rows: two copies of the identity (H^T H = 2 I), so the fit part's solution is
    Q / (2 + lambda) and the validation prediction P / (2 + lambda), P = H_val Q. With
    validation labels P / (2 + lambda*) the validation error is zero at lambda* only."""
    h_fit = torch.cat([torch.eye(4), torch.eye(4)]).double()
    y_fit = torch.arange(1.0, 17.0).reshape(8, 2).double()
    h_val = torch.tensor([[1.0, 2.0, 0.0, 1.0], [0.0, 1.0, 3.0, 1.0]]).double()
    p = h_val @ (h_fit.T @ y_fit)
    h = torch.cat([h_fit, h_val])
    for best in (1e-8, 1e-3, 100.0, 1e8):
        assert choose_ridge(h, torch.cat([y_fit, p / (2 + best)])) == best
    # validation labels zero: the strongest shrinkage wins
    assert choose_ridge(h, torch.cat([y_fit, 0 * p])) == 1e8
    # no validation sample (n = 1): every candidate ties, the first wins as in the
    # official argmin
    assert choose_ridge(h[:1], y_fit[:1]) == 1e-8


def test_solve_is_the_ridge_solution_and_falls_back_to_lu(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(30, 5, generator=gen, dtype=torch.float64)
    g, c = h.T @ h, h.T @ torch.randn(30, 2, generator=gen, dtype=torch.float64)
    lu = torch.linalg.solve(g + 0.5 * torch.eye(5, dtype=torch.float64), c)
    assert torch.allclose(solve_ridge(g, c, 0.5), lu, rtol=1e-12)
    # where round-off makes the Cholesky factorisation fail, LU answers
    monkeypatch.setattr(
        torch.linalg, "cholesky_ex", lambda a: (a, torch.tensor(1, dtype=torch.int32))
    )
    assert torch.equal(solve_ridge(g, c, 0.5), lu)


def test_accounting_and_config_of_an_adapted_run(tmp_path):
    """ViT-Tiny (d = 192, 12 blocks) with adapters, M = 16, 10 classes in 5 tasks."""
    result = invoke(
        "run",
        "--out",
        str(tmp_path),
        *TINY,
        "--methods",
        "ranpac",
        "--set",
        "ranpac.M=16",
        "--set",
        "ranpac.epochs=1",
    )
    assert result.exit_code == 0, result.output
    [path] = tmp_path.glob("runs/synthetic/ranpac/*.json")
    record = json.loads(path.read_text())
    assert record["config"]["method"]["adapt"] == "adapter"  # auto on a ViT
    acc = record["accounting"]
    adapters = 12 * (2 * 192 * 64 + 64 + 192)
    # trained on task 1: the adapters and the cosine head's 2 rows and scale
    assert acc["trainable_per_task"] == [adapters + 2 * 192 + 1, 0, 0, 0, 0]
    # kept: adapters, W_rand (d x M), G (M x M), C and W_o (M x seen classes each)
    assert acc["stored_per_task"] == [
        adapters + 192 * 16 + 16 * 16 + 2 * 16 * 2 * k for k in range(1, 6)
    ]
    # one pass of the adapted ViT per test image, plus the projection and the readout
    assert acc["inference_gflops_per_image"] > acc["backbone_gflops_per_pass"]
    assert acc["inference_gflops_per_image"] < 1.1 * acc["backbone_gflops_per_pass"]
    assert record["timing"]["features_from"] == "extracted"


def test_cnn_auto_means_no_adaptation_and_adapter_is_refused(tmp_path):
    refused = invoke(
        "run",
        "--out",
        str(tmp_path),
        "--scenario",
        "synthetic",
        "--no-progress",
        "--weights",
        "random",
        "--methods",
        "ranpac",
        "--set",
        "ranpac.adapt=adapter",
    )
    assert refused.exit_code == 2
    assert 'adapt = "adapter" inserts adapters into transformer blocks' in refused.output
    assert not tmp_path.exists() or not list(tmp_path.rglob("*.json"))


def test_float32_search_is_the_official_arithmetic_and_drops_small_lambdas():
    """ridge_search: float32 scores every candidate as the official float32 code does; on
    a rank-deficient task (fewer fit samples than M) its small-lambda losses are
    round-off, so it picks a larger lambda than the exact float64 search."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(8, 400, generator=gen)
    x = torch.randn(40, 8, generator=gen)
    h = F.relu(x @ w)
    y = h @ torch.randn(400, 2, generator=gen) / 100  # linear in h: the interpolant is best
    assert ridge_losses_float32(h, y) == ridge_losses_float32(h.double(), y)
    assert choose_ridge(h, y, precision="float32") == official_choice(h, y)
    exact, rounded = ridge_losses(h, y), ridge_losses_float32(h, y)
    assert min(rounded[:4]) > 100 * max(exact[:4])
    assert choose_ridge(h, y) == 1e-8
    # none of the four candidates whose float32 losses are round-off (which larger one
    # wins depends on the CPU's float32 kernels: 1e-3 on an AMD EPYC, larger on others)
    assert choose_ridge(h, y, precision="float32") >= 1e-4
    with pytest.raises(ValueError, match="float16"):
        choose_ridge(h, y, precision="float16")


def test_lambda_split_follows_the_run_seed_and_the_task():
    """The split of a task's samples for the lambda search is drawn from the run's seed
    and the task (the official code splits its shuffled loader's order): another seed
    or another task gives another split; the same pair, the same one (resume)."""
    a, b = split_order(40, 1993, 0), split_order(40, 1993, 0)
    assert torch.equal(a, b) and sorted(a.tolist()) == list(range(40))
    assert not torch.equal(a, split_order(40, 1994, 0))
    assert not torch.equal(a, split_order(40, 1993, 1))


def test_fit_draws_the_split_from_the_seed_torch_was_seeded_with():
    x = torch.randn(30, 6, generator=torch.Generator().manual_seed(3))
    y = torch.tensor([0, 1]).repeat(15)
    picks = []
    for seed in range(12):
        strategy = toy_ranpac(m=40)
        torch.manual_seed(seed)
        strategy.fit(x, y)
        picks.append(strategy.ridges[0])
    assert len(set(picks)) > 1
