"""RanPAC's lambda is never below the float64 resolution of the accumulated Gram matrix
G: where G is rank-deficient (fewer samples seen than its width), G + lambda I is
singular to float64 below M eps ||G||_F, and the exact lambda search, flat there, took
its smallest candidate (fmnist, seed 1994, task 3: 10^-8 against a condition number of
2.6e17, the classifier's accuracy on seen classes 23.0 %)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cl_bench.strategies.blocks.ridge import CANDIDATES, choose_ridge, resolution
from cl_bench.strategies.ranpac import split_order
from tests.helpers.strategies import toy_ranpac

EPS = torch.finfo(torch.float64).eps


def test_resolution_is_width_times_eps_times_the_frobenius_norm():
    g = torch.diag(torch.tensor([3.0, 4.0, 0.0, 0.0], dtype=torch.float64))  # ||G||_F = 5
    assert resolution(g) == 4 * EPS * 5.0
    assert resolution(g.float()) == 4 * torch.finfo(torch.float32).eps * 5.0


def test_candidates_below_the_floor_are_not_chosen():
    """The constructed case of test_ranpac: validation error zero at 10^-8 only and
    growing with lambda, so the lowest candidate at or above the floor wins."""
    h_fit = torch.cat([torch.eye(4), torch.eye(4)]).double()
    y_fit = torch.arange(1.0, 17.0).reshape(8, 2).double()
    h_val = torch.tensor([[1.0, 2.0, 0.0, 1.0], [0.0, 1.0, 3.0, 1.0]]).double()
    h = torch.cat([h_fit, h_val])
    y = torch.cat([y_fit, h_val @ (h_fit.T @ y_fit) / (2 + 1e-8)])
    assert choose_ridge(h, y) == 1e-8
    assert choose_ridge(h, y, floor=1e-8) == 1e-8
    assert choose_ridge(h, y, floor=2e-6) == 1e-5
    assert choose_ridge(h, y, floor=1e-5, precision="float32") >= 1e-5
    assert choose_ridge(h, y, floor=1e9) == max(CANDIDATES)  # none allowed: the largest


def task(gen: torch.Generator, base: torch.Tensor, t: int, seed: int) -> tuple:
    """30 samples of classes 2t and 2t + 1 in 200 dimensions; the 6 that the seed's split
    puts in the validation part are affine combinations of 3 fit samples of their class,
    so the validation error grows with lambda from zero at the interpolant."""
    y = torch.tensor([2 * t, 2 * t + 1]).repeat(15)
    x = base[y] + 10 * torch.randn(30, base.shape[1], generator=gen, dtype=torch.float64)
    order = split_order(30, seed, t)
    fit = order[:24].tolist()
    for v in order[24:].tolist():
        same = [i for i in fit if y[i] == y[v]][:3]
        a = torch.rand(3, generator=gen, dtype=torch.float64)
        x[v] = (a / a.sum()) @ x[same]
    return x, y


def test_fit_chooses_a_lambda_the_accumulated_g_can_carry_and_solves_it():
    """M 0 (h = f), f of width 200, 30 samples per task: G has rank at most 30 t < 200.
    The exact search on the task alone is lowest at the interpolant (10^-8 to 10^-6,
    decided by round-off), where G + lambda I is singular to float64; fit takes
    10^-3, the first candidate above the resolution of G, and W_o is then the exact
    ridge solution (from the dual, H H^T, of all samples) on fresh test samples."""
    strategy, seed = toy_ranpac(m=0, dim=200), 1993
    net = strategy.model
    gen = torch.Generator().manual_seed(0)
    base = 1000 * torch.randn(6, 200, generator=gen, dtype=torch.float64)
    xs, ys = [], []
    torch.manual_seed(seed)  # the split follows the seed torch was seeded with
    for t in range(3):
        x, y = task(gen, base, t, seed)
        order = split_order(30, seed, t)
        unbounded = choose_ridge(x[order], F.one_hot(y, 2 * t + 2).double()[order])
        strategy.fit(x, y)
        xs.append(x)
        ys.append(y)
        h, onehot = torch.cat(xs), F.one_hot(torch.cat(ys), 2 * t + 2).double()
        e, v = torch.linalg.eigh(h @ h.T)
        assert unbounded <= 1e-6 and float(e.max()) / unbounded > 1 / EPS  # singular
        assert 1e-4 < resolution(net.G) < 1e-3
        lam = strategy.ridges[-1]
        assert lam == 1e-3
        exact = h.T @ (v @ ((v.T @ onehot) / (e.clamp_min(0) + lam)[:, None]))
        test_y = torch.arange(2 * t + 2).repeat(5)
        test_x = base[test_y] + 10 * torch.randn(
            len(test_y), 200, generator=gen, dtype=torch.float64
        )
        want, got = test_x @ exact, test_x @ net.W_o.T
        assert float((got - want).abs().max() / want.abs().max()) < 1e-4
        assert torch.equal(got.argmax(1), test_y)
    assert strategy.ridges == [1e-3] * 3
