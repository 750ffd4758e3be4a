"""LCA's local classifier alignment (Tran, Vargas, Than, ICLR 2026, arXiv 2603.09888;
official ``Learner.align`` in tungts1101/LCA at 3e6670b, ``lca.py``).

The classifier is re-trained on features drawn once from the stored class Gaussians
N(mu_c, Sigma_c) (:mod:`cl_bench.strategies.blocks.gaussian_alignment`), ``n`` per
seen class, shuffled every epoch and cut into batches. On a batch of features z_i
with labels y_i and per-sample cross-entropy l_i = CE(h(z_i), y_i), the loss is

    L = (1 / K) sum_{c in batch} [ mean_{i in A_c} l_i
                                   + w mean_{i != j in A_c} |l_i - l_j| ]

over the K classes present in the batch, where A_c holds the samples of class c whose
nearest class mean (Euclidean, over the seen classes) is mu_c: the local region of
class c. A class with no sample in its region falls back to the mean loss over all its
samples and no robustness term; a region of one sample has no robustness term.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from cl_bench.strategies.blocks.gaussian_alignment import gaussian_factor, sample_features

REGION_CHUNK = 4096  # samples whose distances to every class mean are computed at once


def in_own_region(feats: torch.Tensor, labels: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    """Whether each feature's nearest class mean (Euclidean; ``means`` (C, d) in the rows
    ``labels`` index) is its own class's."""
    return torch.cdist(feats, means).argmin(1) == labels


def local_alignment_loss(
    logits: torch.Tensor, labels: torch.Tensor, local: torch.Tensor, weight: float
) -> torch.Tensor:
    """L of the module docstring for one batch: ``logits`` (B, C) over the seen classes,
    ``labels`` (B,) their rows, ``local`` (B,) whether each sample lies in its class's
    region (:func:`in_own_region`). No host sync: the per-class sums are scattered."""
    n_classes = logits.shape[1]
    losses = F.cross_entropy(logits, labels, reduction="none")
    one = torch.ones_like(losses)
    in_region = losses.new_zeros(n_classes).index_add_(0, labels, local.to(losses.dtype))
    present = losses.new_zeros(n_classes).index_add_(0, labels, one)
    counted = torch.where(in_region[labels] > 0, local.to(losses.dtype), one)
    size = losses.new_zeros(n_classes).index_add_(0, labels, counted)
    term1 = losses.new_zeros(n_classes).index_add_(0, labels, losses * counted)
    term1 = term1 / size.clamp(min=1)
    pairs = (labels[:, None] == labels[None, :]) & local[:, None] & local[None, :]
    spread = ((losses[:, None] - losses[None, :]).abs() * pairs).sum(1)
    term2 = losses.new_zeros(n_classes).index_add_(0, labels, spread)
    term2 = term2 / (in_region * (in_region - 1)).clamp(min=1)
    per_class = (term1 + weight * term2) * (present > 0)
    return per_class.sum() / (present > 0).sum()


def align_locally(
    means: torch.Tensor,
    covs: torch.Tensor,
    n: int,
    epochs: int,
    batch_size: int,
    weight: float,
    optimizer: torch.optim.Optimizer,
    scheduler,
    logits: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    """Train what ``optimizer`` holds for ``epochs`` epochs on ``n`` samples per row of
    N(means, covs), drawn once (labels: row indices; ``logits`` maps features to scores
    over those rows), reshuffled every epoch (on the CPU's generator, as official), one
    step of :func:`local_alignment_loss` per ``batch_size`` samples, the scheduler
    stepped per epoch."""
    x, y = sample_features(means, gaussian_factor(covs), n)
    # the samples are fixed, so is each one's region: found once, in chunks
    local = torch.cat(
        [
            in_own_region(x[i : i + REGION_CHUNK], y[i : i + REGION_CHUNK], means)
            for i in range(0, len(x), REGION_CHUNK)
        ]
    )
    for _ in range(epochs):
        shuffle = torch.randperm(len(x)).to(x.device)
        x, y, local = x[shuffle], y[shuffle], local[shuffle]
        for start in range(0, len(x), batch_size):
            batch = slice(start, start + batch_size)
            loss = local_alignment_loss(logits(x[batch]), y[batch], local[batch], weight)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        scheduler.step()
