"""Pieces shared by the prototype-based methods (TOSCA, SimpleCIL)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from cl_bench.contract.loading import method_loader


class CosineClassifier(nn.Module):
    """logits = sigma * cos(f, w_c) over all seen classes (PILOT's CosineLinear).

    ``grow`` adds rows for new classes as the official code does: the first
    task's rows are uniform(-1/sqrt(d), 1/sqrt(d)), later tasks' rows start at
    zero; old rows and sigma are copied. ``grow`` replaces the parameter, so the
    optimizer must be rebuilt afterwards (every method here does, per task).
    """

    def __init__(self, dim: int, learn_scale: bool = True) -> None:
        super().__init__()
        self.dim = dim
        self.weight = nn.Parameter(torch.empty(0, dim))
        self.sigma = nn.Parameter(torch.ones(1), requires_grad=learn_scale)

    @property
    def n_classes(self) -> int:
        return self.weight.shape[0]

    def grow(self, n_total: int) -> None:
        n_new = n_total - self.n_classes
        if n_new <= 0:
            return
        old = self.weight.data
        if self.n_classes == 0:
            bound = 1.0 / math.sqrt(self.dim)
            new = torch.empty(n_new, self.dim, device=old.device).uniform_(-bound, bound)
        else:
            new = torch.zeros(n_new, self.dim, device=old.device)
        self.weight = nn.Parameter(torch.cat([old, new]), requires_grad=self.weight.requires_grad)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return self.sigma * F.linear(F.normalize(f, dim=-1), F.normalize(self.weight, dim=-1))


@torch.no_grad()
def class_means(
    dataset,
    embed: Callable[[torch.Tensor], torch.Tensor],
    device: torch.device,
    batch_size: int = 256,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(classes, means): the mean of ``embed(x)`` per label over ``dataset``
    (an Avalanche dataset yielding (x, y, t), already in its eval transforms).

    The labels stay on the host, where the classes of a batch and their counts are
    read without waiting for the device; the batch's rows, grouped by class (a stable
    sort, so in their order), go to the device as one index per batch, and each class
    sums its rows there. The sums are those of the rows selected by a mask, bit for
    bit, with no sync per class."""
    sums: dict[int, torch.Tensor] = {}
    counts: dict[int, int] = {}
    for x, y, *_ in method_loader(dataset, batch_size):
        f = embed(x.to(device)).float()
        present, sizes = torch.unique(y, return_counts=True)
        rows = torch.argsort(y, stable=True).to(f.device)
        for c, start, n in zip(
            present.tolist(), (sizes.cumsum(0) - sizes).tolist(), sizes.tolist(), strict=True
        ):
            sums[c] = sums.get(c, 0) + f.index_select(0, rows[start : start + n]).sum(0)
            counts[c] = counts.get(c, 0) + n
    classes = sorted(sums)
    means = torch.stack([sums[c] / counts[c] for c in classes])
    return torch.tensor(classes, dtype=torch.long), means


def set_prototypes(
    classifier: CosineClassifier, dataset, embed: Callable, device: torch.device
) -> None:
    """Overwrite the rows of the dataset's classes with their class-mean embeddings."""
    classes, means = class_means(dataset, embed, device)
    classifier.grow(int(classes.max()) + 1)
    classifier.weight.data[classes.to(classifier.weight.device)] = means.to(classifier.weight)
