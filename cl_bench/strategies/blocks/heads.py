"""Pieces shared by the prototype-based methods (TOSCA, SimpleCIL)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from cl_bench.contract.statistics import class_means


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


def set_prototypes(
    classifier: CosineClassifier, dataset, embed: Callable, device: torch.device
) -> None:
    """Overwrite the rows of the dataset's classes with their class-mean embeddings."""
    classes, means = class_means(dataset, embed, device)
    classifier.grow(int(classes.max()) + 1)
    classifier.weight.data[classes.to(classifier.weight.device)] = means.to(classifier.weight)
