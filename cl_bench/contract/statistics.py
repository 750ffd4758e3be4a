"""Class statistics a method computes over a dataset itself: the mean embedding per class
(prototypes), through the run's loader settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import Dataset

from cl_bench.contract.loading import method_loader


@torch.no_grad()
def class_means(
    dataset: Dataset[Any],
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
