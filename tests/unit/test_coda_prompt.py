"""CODA-Prompt against the reference's rules that its parity step check
(bench/parity/methods/coda_prompt/row.py) pinned down: the official per-epoch learning-rate
schedule, and the reference's Gram-Schmidt behind ``gram_schmidt: official``."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

from cl_bench.strategies.coda_prompt import (
    CodaPrompt,
    coda_cosine_factor,
    official_rows,
    orthonormal_rows,
)


def test_coda_cosine_holds_the_first_two_epochs_then_lags_one_epoch():
    epochs = 5
    factors = [coda_cosine_factor(e, epochs) for e in range(epochs)]
    expected = [
        1.0,
        1.0,
        *(math.cos(99 * math.pi * (e - 1) / (200 * (epochs - 1))) for e in range(2, epochs)),
    ]
    assert factors == pytest.approx(expected, abs=1e-12)
    assert coda_cosine_factor(0, 1) == 1.0  # one epoch: no division by zero


def test_strategy_schedule_gives_the_official_rate_per_epoch():
    params = {
        "optimizer": "adam",
        "lr": 0.01,
        "weight_decay": 0.0,
        "epochs": 4,
        "scheduler": "coda_cosine",
    }
    model = torch.nn.Linear(3, 2)
    opt, sched = CodaPrompt.build_optimizer(SimpleNamespace(params=params), model)
    rates = []
    for _ in range(params["epochs"]):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()  # after each epoch, as the strategy steps it
    assert rates == pytest.approx(
        [0.01, 0.01, 0.01 * math.cos(99 * math.pi / 600), 0.01 * math.cos(99 * math.pi * 2 / 600)],
        abs=1e-12,
    )


def classical_gram_schmidt(old: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """The reference's loop written out: every draw minus its projection on each
    earlier column (old ones as they are, new ones before normalisation)."""
    columns = [*old]
    start = len(columns)
    for v in draws:
        u = v.clone()
        for w in columns:
            u -= (v @ w) / (w @ w) * w
        columns.append(u)
    new = torch.stack(columns[start:])
    return new / new.norm(dim=1, keepdim=True)


def drifted_old_rows(width: int, count: int) -> torch.Tensor:
    """Orthonormal rows moved off orthonormality, as training moves them."""
    gen = torch.Generator().manual_seed(3)
    q = torch.linalg.qr(torch.randn(width, count, generator=gen, dtype=torch.float64)).Q.T
    return q + 0.2 * torch.randn(count, width, generator=gen, dtype=torch.float64)


def test_official_rows_is_the_reference_loop_on_the_same_draw():
    old = drifted_old_rows(12, 4)
    torch.manual_seed(5)
    draws = torch.randn(3, 12, dtype=torch.float64)
    torch.manual_seed(5)
    assert_close(official_rows(old, 3), classical_gram_schmidt(old, draws))


def test_rules_agree_up_to_sign_on_orthonormal_old_rows_and_differ_on_drifted_ones():
    old = torch.linalg.qr(torch.randn(12, 4, dtype=torch.float64)).Q.T
    torch.manual_seed(6)
    qr = orthonormal_rows(old, 3)
    torch.manual_seed(6)
    official = official_rows(old, 3)
    signs = torch.sign((qr * official).sum(1, keepdim=True))
    assert_close(qr * signs, official)

    old = drifted_old_rows(12, 4)
    torch.manual_seed(6)
    qr = orthonormal_rows(old, 3)
    torch.manual_seed(6)
    official = official_rows(old, 3)
    assert (qr @ old.T).abs().max() < 1e-12
    assert (official @ old.T).abs().max() > 1e-3  # only nearly orthogonal
