"""Classifier alignment on Gaussian class statistics: MOS, TUNA and CaRE align their heads
this way; LCA and SLDC keep the same statistics.

After each task, each keeps per class of that task the mean and covariance of its
features (+ ``JITTER`` I; the official ``_compute_mean`` of sun-hailong/AAAI25-MOS
``models/mos.py`` and of Ngahoang2005/ICCV2025-TUNA ``models/tuna.py`` at 8e1c3ec),
or only the variances when a diagonal covariance is asked for. The classifier alone is
then trained on samples of N(mean_c, cov_c) of every seen class: per epoch,
``n`` samples per class, shuffled, one SGD step per class-sized chunk, and one step of
the learning-rate schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F

from cl_bench.contract.optimizer import make_optimizer
from cl_bench.errors import UserError

JITTER = 1e-4  # added to every class covariance (official _compute_mean)


def class_gaussians(
    feats: torch.Tensor,
    labels: torch.Tensor,
    classes: list[int],
    means: torch.Tensor,
    covs: torch.Tensor,
    rows: int,
    jitter: float = JITTER,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``means`` (C, d) and ``covs`` (C, d, d), or variances (C, d), grown to ``rows``
    classes, with the mean and covariance (+ ``jitter`` I) of the features ``feats`` of
    each of ``classes`` (no spread for a class with fewer than 2 images, zeros for one
    with none). Run once per task: selecting a class's rows by a mask on the device
    syncs once per class, which no training step pays."""
    d = feats.shape[1]
    grown_means = means.new_zeros(rows, d)
    grown_covs = covs.new_zeros(rows, *covs.shape[1:])
    grown_means[: len(means)], grown_covs[: len(covs)] = means, covs
    eye = torch.eye(d, device=feats.device)
    for c in classes:
        f = feats[labels == c]
        spread = torch.cov(f.T) if len(f) > 1 else torch.zeros_like(eye)
        cov = spread + jitter * eye
        grown_means[c] = f.mean(0) if len(f) else 0
        grown_covs[c] = cov if grown_covs.dim() == 3 else cov.diagonal()
    return grown_means, grown_covs


def gaussian_factor(cov: torch.Tensor) -> torch.Tensor:
    """L with L L^T = cov (C, d, d), computed in float64; for variances (C, d), their
    square roots. Class statistics that are not finite, or a covariance that is not
    positive definite, fail the run with the likely cause instead of a linear-algebra
    traceback."""
    try:
        if not torch.isfinite(cov).all():
            raise torch.linalg.LinAlgError("not finite")
        factor = cov.sqrt() if cov.dim() == 2 else torch.linalg.cholesky(cov.double()).float()
    except torch.linalg.LinAlgError as e:
        raise UserError(
            f"the run diverged: the classifier alignment cannot sample from the class "
            f"statistics ({e}); the adapted features grew too large or collapsed, most "
            "likely because a learning rate (or its ratio) is set too high; lower it with "
            "--set. Nothing was saved as a result; the failure is recorded in the run's "
            ".failed file."
        ) from None
    return factor


def sample_features(
    means: torch.Tensor, factors: torch.Tensor, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` samples of N(mean_i, L_i L_i^T) per row i, class by class, with their row
    index as label."""
    z = torch.randn(len(means), n, means.shape[1], device=means.device)
    noise = z * factors[:, None] if factors.dim() == 2 else z @ factors.transpose(1, 2)
    labels = torch.arange(len(means), device=means.device).repeat_interleave(n)
    return (means[:, None] + noise).flatten(0, 1), labels


def align_on_samples(
    means: torch.Tensor,
    covs: torch.Tensor,
    n: int,
    epochs: int,
    optimizer: torch.optim.Optimizer,
    scheduler,
    logits: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    """Train what ``optimizer`` holds for ``epochs`` epochs on ``n`` samples per row of
    N(means, covs) (labels: row indices; ``logits`` maps features to scores over those
    rows), one step per class-sized chunk of the shuffled samples, the scheduler stepped
    per epoch."""
    factors = gaussian_factor(covs)
    for _ in range(epochs):
        x, y = sample_features(means, factors, n)
        shuffle = torch.randperm(len(x), device=x.device)
        x, y = x[shuffle], y[shuffle]
        for i in range(len(means)):
            chunk = slice(i * n, (i + 1) * n)
            loss = F.cross_entropy(logits(x[chunk]), y[chunk])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        scheduler.step()


def align_head_with_sgd(
    means: torch.Tensor,
    covs: torch.Tensor,
    params: dict,
    period: int,
    head: Iterable[torch.nn.Parameter],
    logits: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    """The official alignment of MOS, TUNA and CaRE: ``head`` alone by SGD at ``ca_lr``
    (the method's momentum and weight decay), cosine to 0 over ``period`` epochs, for
    ``ca_epochs`` epochs of ``batch_size x ca_samples`` samples per row
    (:func:`align_on_samples`)."""
    optimizer, scheduler = make_optimizer(
        dict(
            params,
            lr=params["ca_lr"],
            optimizer="sgd",
            scheduler="cosine",
            epochs=period,
            eta_min=0.0,
        ),
        head,
    )
    align_on_samples(
        means,
        covs,
        params["batch_size"] * params["ca_samples"],
        params["ca_epochs"],
        optimizer,
        scheduler,
        logits,
    )
