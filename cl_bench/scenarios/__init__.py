"""Scenarios: dataset + class order + task split, from ``benchmarks/<name>.yaml``.

Card keys: ``dataset`` (a loader name), ``dataset_args`` (loader keywords),
``init_cls``, ``increment``, ``class_order`` (``seed``: PILOT's permutation
with the run seed; ``natural``; or an explicit list of class ids) and
``test_shuffle`` (evaluate on a seeded shuffle of the seen test set, or in
stored class order as PILOT's loader does).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

from cl_bench.cards.card import Card
from cl_bench.errors import UserError, unknown
from cl_bench.scenarios.folders import cifar100, cifar_root, imagefolder, need_root
from cl_bench.scenarios.image_data import ImageData
from cl_bench.scenarios.loaders import LOADERS as MEMORY_LOADERS
from cl_bench.scenarios.loaders import find_fmnist_dir
from cl_bench.scenarios.order import class_order

# loaders of data on disk also take the scenario's name (for messages) and --download
DISK_LOADERS = {"imagefolder": imagefolder, "cifar100": cifar100}
LOADERS = {**MEMORY_LOADERS, **DISK_LOADERS}


def loader_of(
    card: Card, data_root: Path | None, download: bool
) -> tuple[Callable[..., ImageData], dict]:
    """The card's loader and its keyword arguments, checked to fit its signature."""
    name = card.params["dataset"]
    if name not in LOADERS:
        raise unknown("dataset", name, LOADERS)
    args = dict(card.params.get("dataset_args") or {})
    if name in DISK_LOADERS:
        args.update(name=card.name, download=download)
    try:
        inspect.signature(LOADERS[name]).bind(data_root, **args)
    except TypeError as e:
        raise misfit(card, args, e) from None
    return LOADERS[name], args


def misfit(card: Card, args: dict, error: TypeError) -> UserError:
    return UserError(
        f"{card.path}: dataset_args {args} do not fit the "
        f"{card.params['dataset']} loader ({error})."
    )


def load_data(card: Card, data_root: Path | None, download: bool = False) -> ImageData:
    loader, args = loader_of(card, data_root, download)
    try:
        return loader(data_root, **args)
    except TypeError as e:  # an argument of the right name and the wrong type
        raise misfit(card, args, e) from None


def locate_data(card: Card, data_root: Path | None, download: bool = False) -> None:
    """What :func:`load_data` checks before it reads an image, for the dry run: a known
    dataset, loader arguments that fit it, and its files where the loader looks."""
    _, args = loader_of(card, data_root, download)
    name = card.params["dataset"]
    if name == "imagefolder":
        need_root(data_root, args.get("folder"), card.name)
    elif name == "cifar100":
        cifar_root(data_root, download)
    elif name == "fmnist-full":
        find_fmnist_dir(None if data_root is None else Path(data_root))


def check_class_order(card: Card, n_classes: int | None) -> str | list[int]:
    """The card's class order (after --set): "seed", "natural" or a list of class ids,
    which with ``n_classes`` must hold every id of 0..n-1 once (the dry run knows the
    class count only when the card states it)."""
    spec = card.params.get("class_order", "seed")
    if isinstance(spec, list) and all(isinstance(c, int) and not isinstance(c, bool) for c in spec):
        if n_classes is not None:
            class_order(n_classes, explicit=spec)
        return spec
    if isinstance(spec, str) and spec in ("seed", "natural"):
        return spec
    raise UserError(
        f'Scenario {card.name}: class_order {spec!r} is none of "seed" '
        '(PILOT\'s seeded permutation), "natural" or a list of class ids (every '
        f"id once). Fix `class_order:` in {card.path}, or --set "
        "scenario.class_order=seed."
    )


def scenario_order(card: Card, n_classes: int, seed: int) -> list[int]:
    spec = check_class_order(card, n_classes)
    if isinstance(spec, list):
        return class_order(n_classes, explicit=spec)
    return class_order(n_classes, seed if spec == "seed" else None)
