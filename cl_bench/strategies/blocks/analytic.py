"""Recursive least squares: the ridge solution on every sample seen so far, updated
chunk by chunk without keeping a sample (the analytic classifier of MiN, official
``MiNbaseNet.fit`` in github.com/thuwng/MiN-NeurIPS2025 at 292d883
``MiN/utils/inc_net.py``; the same update as ACIL's), in float64.

With R = (X^T X + gamma I)^-1 over the rows X seen so far (R = I / gamma before any)
and W the ridge weights, a chunk (X, Y) updates them by the Woodbury identity:

    K = (I + X R X^T)^-1
    R <- R - R X^T K X R
    W <- W + R X^T (Y - X W)                               (with the updated R)

so that W = (X^T X + gamma I)^-1 X^T Y on all rows at every point, whatever the
chunking (up to round-off). Each row costs O(M^2) for M features, with no M x M
solve (cf. :mod:`cl_bench.strategies.blocks.ridge`, which accumulates X^T X and solves
it, O(M^3) per solve). Y's columns are the classes seen so far; ``grow`` adds zero
columns for new ones.
"""

from __future__ import annotations

import torch
from torch import nn


class RecursiveRidge(nn.Module):
    """R (M x M) and W (M x classes), float64 buffers."""

    def __init__(self, features: int, gamma: float) -> None:
        super().__init__()
        self.register_buffer("R", torch.eye(features, dtype=torch.float64).div_(gamma))
        self.register_buffer("W", torch.zeros(features, 0, dtype=torch.float64))

    @property
    def n_outputs(self) -> int:
        return self.W.shape[1]

    def grow(self, n_outputs: int) -> None:
        """Zero columns up to ``n_outputs`` (a new class has no sample yet)."""
        extra = n_outputs - self.n_outputs
        if extra > 0:
            self.W = torch.cat([self.W, self.W.new_zeros(self.W.shape[0], extra)], dim=1)

    @torch.no_grad()
    def update(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """One chunk: rows ``x`` (B, M) with targets ``y`` (B, outputs)."""
        x, y = x.to(self.R), y.to(self.R)
        rx = self.R @ x.T
        k = torch.eye(len(x), dtype=x.dtype, device=x.device) + x @ rx
        self.R.addmm_(rx, torch.linalg.solve(k, rx.T), alpha=-1)  # no M x M temporary
        self.W += self.R @ x.T @ (y - x @ self.W)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.W) @ self.W
