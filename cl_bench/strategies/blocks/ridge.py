"""Ridge regression from accumulated statistics (RanPAC), in float64.

With H the (projected) features and Y the one-hot labels of every sample seen so
far, G = H^T H and C = H^T Y are sums over samples, so they grow task by task
without keeping any old sample, and

    W = (G + lambda I)^-1 C

is exactly the batch ridge solution on all data seen so far.

The regulariser is chosen as the official code (RanPAC ``optimise_ridge_parameter``,
PILOT ``models/ranpac.py``) chooses it, at every task and from that task's samples
only: the first 80% (``int(0.8 n)``) of them, in a shuffled order, fit a ridge
solution for each candidate lambda in 10^-8 .. 10^8 (17 powers of ten); the one
with the least mean squared error on the other 20% wins (the first on ties). The
official code solves one M x M system per candidate; here one eigendecomposition
gives all 17 solutions (of the n_fit x n_fit kernel H H^T when n_fit <= M, the dual
form, else of the M x M Gram matrix): the same solutions up to round-off.

One rule the official code does not state (its float32 search keeps to it in
effect): a candidate below the float64 resolution of the accumulated G (``resolution``:
M eps ||G||_F) is not chosen. G has rank at most the number of samples seen, so with
fewer samples than M its smallest eigenvalues are zero; below that resolution
G + lambda I is singular to float64 and a solve returns round-off (a direct solve
amplifies G's round-off in its null space by 1 / lambda). The official float32 search
never reaches there: its own solves of G_fit + lambda I are round-off at small
lambda and score far above the rest. The exact float64 losses do not: on a task whose
samples span less than M dimensions they are flat from 10^-8 up to about the smallest
nonzero eigenvalue of G_fit, and the first argmin then took 10^-8, which the
accumulated G could not carry (fmnist, EfficientNet-Lite0, M 10,000, seed 1994,
task 3: condition number 2.6e17 against 1 / eps = 4.5e15).
"""

from __future__ import annotations

import torch

CANDIDATES = tuple(10.0**k for k in range(-8, 9))
FIT_SHARE = 0.8


def choose_ridge(
    h: torch.Tensor,
    y: torch.Tensor,
    candidates: tuple[float, ...] = CANDIDATES,
    precision: str = "float64",
    floor: float = 0.0,
) -> float:
    """The candidate with the least validation MSE (rows: fit part, then validation
    part, as ordered) among those at or above ``floor`` (the :func:`resolution` of the
    G the chosen lambda will be solved with; the largest candidate if none is). With
    an empty part every candidate scores alike and the first is taken, as the official
    code's argmin does. ``precision``: "float64" (exact, :func:`ridge_losses`) or
    "float32" (the official arithmetic, :func:`ridge_losses_float32`)."""
    if precision not in ("float64", "float32"):
        raise ValueError(f"ridge search precision {precision!r} is neither float64 nor float32")
    allowed = tuple(lam for lam in candidates if lam >= floor) or (max(candidates),)
    search = ridge_losses if precision == "float64" else ridge_losses_float32
    losses = search(h, y, allowed)
    return allowed[min(range(len(losses)), key=losses.__getitem__)]


def resolution(g: torch.Tensor) -> float:
    """The smallest lambda at which G + lambda I is solvable in G's precision:
    M eps ||G||_F, the numerical-rank tolerance of ``torch.linalg.matrix_rank``
    (M eps ||G||_2) with the Frobenius norm as its upper bound. Eigenvalues of G below
    it cannot be told from zero (round-off in G is of that order), so where G is
    rank-deficient and lambda is smaller, a solve of G + lambda I returns round-off in
    G's null space."""
    return g.shape[0] * torch.finfo(g.dtype).eps * float(torch.linalg.matrix_norm(g))


def ridge_losses(
    h: torch.Tensor, y: torch.Tensor, candidates: tuple[float, ...] = CANDIDATES
) -> list[float]:
    """The validation MSE of each candidate (what :func:`choose_ridge` minimises; all
    zero when a part is empty), averaged over the rows and the columns of ``y``."""
    n_fit = int(h.shape[0] * FIT_SHARE)
    fit, val = h[:n_fit].double(), h[n_fit:].double()
    y_fit, y_val = y[:n_fit].double(), y[n_fit:].double()
    if n_fit == 0 or val.shape[0] == 0:
        return [0.0] * len(candidates)
    if n_fit <= h.shape[1]:  # dual: W^T = H_fit^T (H_fit H_fit^T + lambda I)^-1 Y_fit
        e, v = torch.linalg.eigh(fit @ fit.T)
        left, right = (val @ fit.T) @ v, v.T @ y_fit
    else:  # primal: W^T = (H_fit^T H_fit + lambda I)^-1 H_fit^T Y_fit
        e, v = torch.linalg.eigh(fit.T @ fit)
        left, right = val @ v, v.T @ (fit.T @ y_fit)
    e = e.clamp_min(0.0)  # a Gram matrix: negative eigenvalues are round-off
    return [float(((left / (e + lam)) @ right - y_val).pow(2).mean()) for lam in candidates]


def ridge_losses_float32(
    h: torch.Tensor, y: torch.Tensor, candidates: tuple[float, ...] = CANDIDATES
) -> list[float]:
    """The validation MSE of each candidate as the official code computes it (RanPAC
    ``RanPAC.py`` ``optimise_ridge_parameter`` at commit 012927f; LAMDA-PILOT
    ``models/ranpac.py`` at 2647455): float32, one M x M solve of G_fit + lambda I per
    candidate. When the task has fewer fit samples than M, G_fit is rank-deficient and
    float32 cannot solve it for small lambda: those losses are round-off, far above the
    exact ones, so in effect the small candidates drop out of the search (bench/parity
    results ranpac.json, step check)."""
    n_fit = int(h.shape[0] * FIT_SHARE)
    fit, val = h[:n_fit].float(), h[n_fit:].float()
    y_fit, y_val = y[:n_fit].float(), y[n_fit:].float()
    if n_fit == 0 or val.shape[0] == 0:
        return [0.0] * len(candidates)
    g, c = fit.T @ fit, fit.T @ y_fit
    eye = torch.eye(g.shape[0], dtype=g.dtype, device=g.device)
    return [
        float((val @ torch.linalg.solve(g + lam * eye, c) - y_val).pow(2).mean())
        for lam in candidates
    ]


def solve_ridge(g: torch.Tensor, c: torch.Tensor, lam: float) -> torch.Tensor:
    """(G + lambda I)^-1 C by Cholesky (G + lambda I is symmetric positive definite),
    by LU where round-off makes the factorisation fail. Meaningful for lambda at or
    above :func:`resolution` (G + lambda I is singular to G's precision below it)."""
    a = g + lam * torch.eye(g.shape[0], dtype=g.dtype, device=g.device)
    factor, info = torch.linalg.cholesky_ex(a)
    if int(info) == 0:
        return torch.cholesky_solve(c, factor)
    return torch.linalg.solve(a, c)
