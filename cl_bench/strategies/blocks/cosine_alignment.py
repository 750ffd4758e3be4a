"""The classifier alignment and the lowest-entropy choice that TUNA and CaRE share (the
same official routines: Ngahoang2005/ICCV2025-TUNA ``models/tuna.py`` at 8e1c3ec and
LMMMEng/CaRE ``models/care.py`` at d90800a).

The model aligned keeps, per seen class in classifier order (``order``), a Gaussian
(``means``, ``covs``), the task of each class (``task_of_class``), the current task
index (``task``), a cosine classifier (``head``, ``cosine``); the alignment trains the
head alone on samples of those Gaussians
(:func:`cl_bench.strategies.blocks.gaussian_alignment.align_head_with_sgd`).
"""

from __future__ import annotations

import torch
from torch import nn

from cl_bench.strategies.blocks.gaussian_alignment import align_head_with_sgd

ENTROPY_EPS = 1e-10  # inside the log of the official entropy


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """H(softmax(logits)) over the last dimension, with the official 1e-10 in the log."""
    p = logits.softmax(-1)
    return -(p * torch.log(p + ENTROPY_EPS)).sum(-1)


def combine(
    task_logits: torch.Tensor, universal_logits: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``task_logits`` (T, B, C) under every task set, ``universal_logits`` (B, C):
    the summed probabilities of the lowest-entropy task set and the universal set,
    and the chosen set per image."""
    choice = entropy(task_logits).argmin(0)
    chosen = task_logits[choice, torch.arange(task_logits.shape[1], device=choice.device)]
    return chosen.softmax(-1) + universal_logits.softmax(-1), choice


def decay_factors(task_of_position: torch.Tensor, task: int, official: bool) -> torch.Tensor:
    """0.9 + 0.1 (k + 1) / (task + 1) per seen class, k its task; ``task_of_position``
    gives the task of every seen class in classifier order. ``official``: k is the
    official ``class_idx // task_size`` with task_size = known - total, the negated size
    of the current task, so the classes get floor(-i / size) instead of their task."""
    if official:
        size = int((task_of_position == task).sum())
        position = torch.arange(len(task_of_position), device=task_of_position.device)
        k = torch.div(position, -size, rounding_mode="floor")
    else:
        k = task_of_position
    return 0.9 + (k + 1).double() / (task + 1) * 0.1


def align_classifier(model: nn.Module, params: dict) -> None:
    """Classifier alignment: the classifier blocks alone on Gaussian samples of every
    seen class (``batch_size x ca_samples`` per class and epoch, one SGD step per
    class-sized chunk, s cos logits, cosine schedule of period ``ca_tmax`` epochs)."""
    order = model.order.to(model.means.device)
    means = model.means[order]
    if params["decay"]:
        task_of = model.task_of_class.to(order.device)[order]
        scale = decay_factors(task_of, model.task, params["decay_bug"])
        means = (means.double() * scale[:, None]).float()
    align_head_with_sgd(
        means,
        model.covs[order],
        params,
        params["ca_tmax"],
        model.head.parameters(),
        lambda x: params["scale"] * model.cosine(x),
    )
