"""TIES merging of task vectors (Yadav et al., "TIES-Merging: Resolving Interference
When Merging Models", NeurIPS 2023) as LCA's official code writes it
(tungts1101/LCA at 3e6670b, ``helper.py``: ``trim``, ``merge_task_vectors``, ``merge``).

For one parameter with base value b and fine-tuned values p_1 .. p_K, the task vectors
tau_k = p_k - b are merged in three steps:

    trim:   tau_k <- tau_k where |tau_k| >= the m-th largest |tau_k|, else 0,
            m = max(1, floor(numel * topk / 100))                (topk 100: all kept)
    elect:  gamma = sign(sum_k sign(tau_k))                      (a vote of signs)
    mean:   tau = sum_k [sign(tau_k) = gamma] tau_k / max(1, sum_k [sign(tau_k) = gamma])

and the merged parameter is b + lambda tau. The sign is elected by counting the task
vectors' signs, as the official code does (the TIES paper sums their values): with two
task vectors, an entry where they disagree merges to 0.
"""

from __future__ import annotations

import torch


def trim(tau: torch.Tensor, topk: float) -> torch.Tensor:
    """``tau`` with every entry below the ``topk`` percent largest magnitudes set to 0
    (at least one kept; ties at the threshold are kept)."""
    flat = tau.flatten()
    keep = max(1, int(flat.numel() * topk / 100))
    threshold = flat.abs().topk(keep).values[-1]
    return torch.where(tau.abs() >= threshold, tau, torch.zeros_like(tau))


def disjoint_mean(taus: list[torch.Tensor]) -> torch.Tensor:
    """The elected-sign mean of the (trimmed) task vectors ``taus`` (module docstring)."""
    stacked = torch.stack(taus)
    signs = stacked.sign()
    agree = signs == signs.sum(0).sign()
    return (stacked * agree).sum(0) / agree.sum(0).clamp(min=1)


@torch.no_grad()
def ties_merge(
    base: torch.Tensor, tuned: list[torch.Tensor], topk: float = 100.0, coef: float = 1.0
) -> torch.Tensor:
    """``base + coef * disjoint_mean(trim(p - base) for p in tuned)``."""
    return base + coef * disjoint_mean([trim(p - base, topk) for p in tuned])
