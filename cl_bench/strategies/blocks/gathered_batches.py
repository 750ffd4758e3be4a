"""Training batches of in-memory features, gathered by one index per tensor.

Avalanche 0.6's training loader reads a mini-batch one sample at a time, each through
its dataset's layers (subset, transform groups, data attributes), and collates the
samples: a sizeable share of a step as small as TOSCA's on features (bench figure
loop-overhead times that loop against a bare one). Features in memory do not change
between epochs, so :class:`GatheredTaskBalancedLoader` reads each sample once per
experience, collates them all once, and gathers every batch with one index per field.
Its sampler is Avalanche's own and its loader a ``torch.utils.data.DataLoader`` like
Avalanche's, so the random draws (the sampler's permutation, the loader's base seed) and
the batches are the same, bit for bit (tested): only the reading changes.
"""

from __future__ import annotations

import torch
from avalanche.benchmarks.utils.data_loader import TaskBalancedDataLoader
from torch.utils.data import DataLoader, Dataset


def _as_is(batch):
    """Collation of a batch :class:`Rows` has already collated."""
    return batch


class Rows(Dataset):
    """The samples of ``datasets`` (concatenated, as Avalanche's loader indexes them),
    collated once by ``collate`` (the loader's); ``__getitems__`` gathers a batch by
    index, what ``torch.utils.data.DataLoader`` calls when it is defined."""

    def __init__(self, datasets: list, collate) -> None:
        parts = [collate([d[i] for i in range(len(d))]) for d in datasets if len(d)]
        self.fields = [torch.cat(field) for field in zip(*parts, strict=True)]

    def __len__(self) -> int:
        return len(self.fields[0])

    def __getitem__(self, i: int) -> list[torch.Tensor]:
        return [f[i] for f in self.fields]

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        index = torch.as_tensor(indices, dtype=torch.long)
        return [f[index] for f in self.fields]


class GatheredTaskBalancedLoader(TaskBalancedDataLoader):
    """Avalanche's task-balanced training loader over samples that stay the same in
    every epoch (features in memory, no per-epoch transform), read once per experience
    and gathered per batch. In-process only: workers would copy every batch anyway."""

    _rows: Rows | None = None

    def _make_pytorch_loader(self, datasets, batch_sampler) -> DataLoader:
        if self._rows is None:
            self._rows = Rows(datasets, self.loader_kwargs["collate_fn"])
        return DataLoader(
            self._rows,
            batch_sampler=batch_sampler,
            collate_fn=_as_is,
            num_workers=0,
            pin_memory=bool(self.loader_kwargs.get("pin_memory")),
            generator=self.loader_kwargs.get("generator"),
        )
