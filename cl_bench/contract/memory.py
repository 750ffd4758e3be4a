"""What a method's :meth:`~cl_bench.contract.spec.Method.memory` hook returns: its
dominant allocations (:class:`Allocation`) under a run's :class:`Workload`; the
estimate that adds what every run allocates is :mod:`cl_bench.engine.memory`."""

from __future__ import annotations

from dataclasses import dataclass

FLOAT = 4  # bytes of a float32


@dataclass(frozen=True)
class Allocation:
    """One dominant allocation: what it is, its bytes, and the setting that scales it
    (as the user changes it: ``--image-size``; a method's hook names its own key,
    ``M``, which the estimate prefixes with the card's name: ``ranpac.M``)."""

    what: str
    nbytes: int
    setting: str


@dataclass(frozen=True)
class Workload:
    """What a run's allocations scale with, known before anything loads: the
    scenario's classes, tasks and images (0: unknown) and the backbone's feature width,
    ViT blocks (0 on a CNN) and input size."""

    n_classes: int
    n_tasks: int
    train_images: int
    test_images: int
    dim: int
    blocks: int
    image_size: int


def adapter_sets(work: Workload, ffn: int, count: int, setting: str) -> Allocation:
    """``count`` sets of AdaptFormer adapters of width ``ffn``, one per ViT block
    (down d x ffn, up ffn x d, their biases), for the method hooks that keep them."""
    per_set = work.blocks * (2 * work.dim * ffn + ffn + work.dim) * FLOAT
    return Allocation(f"{count} adapter set(s) of width {ffn}", count * per_set, setting)
