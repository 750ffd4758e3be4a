"""How data loaders are set up: how many worker processes, and the keyword settings
every loader of a run gets, Avalanche's and a method's own alike.

A GPU waits on its loader when images on disk are decoded by fewer processes than it
can consume, so on a GPU the worker count is what the process may really use: its CPU
affinity (``os.sched_getaffinity``: a container's, ``taskset``'s or Slurm's cgroup
mask) and ``SLURM_CPUS_PER_TASK``, the smaller, less one core left to the main
process, which feeds the GPU. ``os.cpu_count()`` counts the machine's cores, which a
job on a shared node does not own. On the CPU the model's own passes use every core
and one of them costs far more than decoding an image, so one worker overlaps the
decoding and more would only take memory.

Data in memory (tensors, cached features) is read with no worker at all: indexing a
tensor costs less than sending a batch between processes, and the main process draws
every random number in the order it always did, so in-memory runs (every test, CI)
give the numbers they always gave. So, on the CPU, are the test images of a run on
disk, which are decoded once and kept (:mod:`cl_bench.scenarios.decoded_tests`): a
worker would cost a fork of the run's process at every evaluation
(:meth:`Loading.evaluation_in_memory`). Training images on disk are always read by at
least one worker, and the random training crop of image i is drawn from a generator
seeded with the loader's base seed (one draw of the run's generator per pass) and i
(:class:`cl_bench.scenarios.transforms.FileTransform`), so the crops are the same
whichever worker, and however many workers, decode it: an on-disk run gives the same
numbers on a 2-core CPU and on a 32-core GPU node. For the same reason workers are not
persistent: a persistent worker keeps the base seed of the loader's first pass, and
every epoch would crop every image the same way; a fresh pass forks fresh workers,
which costs little next to decoding a training set. Deterministic transforms (the
evaluation, the feature store, a method's own passes) give the same bits with any count.

The engine sets the run's :class:`Loading` once per run (:func:`configure_loading`);
a method that iterates a dataset itself, outside Avalanche's loop, does it through
:func:`method_loader`, which reads it, so its loader gets the same settings.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

# batches each worker prepares ahead (PyTorch's default, and what Avalanche's loaders,
# which do not pass the setting on, use): one in the making while one waits is enough
# to keep a worker busy; the batches held ahead are workers x PREFETCH_FACTOR
PREFETCH_FACTOR = 2


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity set, bounded by Slurm's
    ``SLURM_CPUS_PER_TASK`` where that is set to a positive count."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity API (macOS)
        n = os.cpu_count() or 1
    raw = os.environ.get("SLURM_CPUS_PER_TASK", "").strip()
    if raw.isdigit() and int(raw) > 0:
        n = min(n, int(raw))
    return max(n, 1)


def loader_workers() -> int:
    """Loader worker processes for a GPU run: every usable CPU but one, which the main
    process keeps; one where there is only one."""
    n = usable_cpus()
    return n - 1 if n > 1 else 1


@dataclass(frozen=True)
class Loading:
    """A run's loader settings: ``workers`` processes (0: in the main process) and
    whether batches are pinned for a fast copy to the GPU."""

    workers: int = 0
    pin_memory: bool = False

    @classmethod
    def for_run(cls, device: torch.device | str, on_disk: bool) -> Loading:
        """The settings of a run on ``device`` whose inputs are image files on disk
        (``on_disk``) or tensors in memory."""
        cuda = torch.device(device).type == "cuda"
        workers = (loader_workers() if cuda else 1) if on_disk else 0
        return cls(workers=workers, pin_memory=cuda)

    def dataloader_kwargs(self) -> dict[str, Any]:
        """Keywords of a ``torch.utils.data.DataLoader``: prefetch where there are
        workers (not persistent ones: see the module docstring)."""
        kwargs = {"num_workers": self.workers, "pin_memory": self.pin_memory}
        if self.workers:
            kwargs |= {"prefetch_factor": PREFETCH_FACTOR}
        return kwargs

    def in_memory(self) -> Loading:
        """These settings for data held in memory: no worker (pinning as before)."""
        return replace(self, workers=0)

    def evaluation_in_memory(self) -> Loading:
        """The settings of an evaluation whose test images are in memory (uint8, decoded
        once): on the CPU no worker, since forking the run's process for each evaluation
        costs more than the division by 255 it would overlap; on a GPU (the run pins its
        batches exactly there) the run's workers, which convert and collate each batch
        while the GPU computes the last one."""
        return self if self.pin_memory else self.in_memory()

    def strategy_kwargs(self) -> dict[str, Any]:
        """Keywords of an Avalanche strategy's ``train`` and ``eval`` calls: the loader
        settings Avalanche 0.6's ``make_train_dataloader`` and ``make_eval_dataloader``
        pass on to their loaders (``num_workers``, ``pin_memory``; they drop any other,
        ``prefetch_factor`` included)."""
        kwargs = self.dataloader_kwargs()
        kwargs.pop("prefetch_factor", None)
        return kwargs


_current = Loading()


def configure_loading(device: torch.device | str, on_disk: bool) -> Loading:
    """Set the process's loader settings for the run about to start (the engine does,
    once per run) and return them."""
    global _current
    _current = Loading.for_run(device, on_disk)
    return _current


def current_loading() -> Loading:
    """The settings :func:`configure_loading` set last; before any run, no workers and
    no pinning (what a strategy driven outside the engine, in a test, gets)."""
    return _current


def method_loader(
    dataset: Dataset[Any],
    batch_size: int,
    shuffle: bool = False,
    *,
    in_memory: bool = False,
    collate_fn: Callable[[list[Any]], Any] | None = None,
) -> DataLoader[Any]:
    """A loader over ``dataset`` for a method's own pass (class statistics, prototypes,
    a fit, importances) with the run's settings; ``in_memory``: the caller knows the
    dataset holds tensors (features), which are read with no worker whatever the run
    reads its images from. No generator is given, so the loader draws its base seed
    from the global generator, as a plain ``DataLoader`` always did."""
    settings = current_loading().in_memory() if in_memory else current_loading()
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        collate_fn=collate_fn,
        **settings.dataloader_kwargs(),
    )
