"""Scenarios: dataset + class order + task split, from ``benchmarks/<name>.yaml``.

Card keys: ``dataset`` (a loader name), ``dataset_args`` (loader keywords),
``init_cls``, ``increment``, ``class_order`` (``seed``: PILOT's permutation
with the run seed; ``natural``; or an explicit list of class ids) and
``test_shuffle`` (evaluate on a seeded shuffle of the seen test set, or in
stored class order as PILOT's loader does).
"""

from __future__ import annotations

from pathlib import Path

from cl_bench.cards.config import Card
from cl_bench.errors import UserError, unknown
from cl_bench.scenarios.folders import cifar100, imagefolder
from cl_bench.scenarios.image_data import ImageData
from cl_bench.scenarios.loaders import LOADERS as MEMORY_LOADERS
from cl_bench.scenarios.order import class_order

# loaders of data on disk also take the scenario's name (for messages) and --download
DISK_LOADERS = {"imagefolder": imagefolder, "cifar100": cifar100}
LOADERS = {**MEMORY_LOADERS, **DISK_LOADERS}


def load_data(card: Card, data_root: Path | None, download: bool = False) -> ImageData:
    name = card.params["dataset"]
    if name not in LOADERS:
        raise unknown("dataset", name, LOADERS)
    args = dict(card.params.get("dataset_args") or {})
    if name in DISK_LOADERS:
        args.update(name=card.name, download=download)
    try:
        return LOADERS[name](data_root, **args)
    except TypeError as e:
        raise UserError(f"{card.path}: dataset_args {args} do not fit the {name} loader "
                        f"({e}).") from None


def scenario_order(card: Card, n_classes: int, seed: int) -> list[int]:
    spec = card.params.get("class_order", "seed")
    if isinstance(spec, list):
        return class_order(n_classes, explicit=spec)
    if spec == "seed":
        return class_order(n_classes, seed)
    if spec == "natural":
        return class_order(n_classes)
    raise UserError(f'{card.path}: class_order must be "seed", "natural" or a list of class '
                    f"ids, not {spec!r}.")
