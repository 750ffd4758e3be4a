"""What a scenario holds, read off its card without loading it: the class count, the
image counts and the bytes of images kept in memory. The dry run sizes settings by
the task count from here, and the memory estimate (:mod:`cl_bench.engine.memory`)
sizes a run before its data exists, so a scenario too large for the machine is
refused before anything is generated or written.
"""

from __future__ import annotations

from dataclasses import dataclass

from cl_bench.cards.card import Card

FIXED_CLASSES = {"fmnist": 10, "fmnist-full": 10, "digits": 10, "cifar100": 100}
FIXED_IMAGES = {
    "fmnist": (5000, 1000),
    "fmnist-full": (60000, 10000),
    "cifar100": (50000, 10000),
}  # (train, test)
GENERATED = ("synthetic",)  # loaders that make their images from dataset_args


def class_count(scenario: Card) -> int | None:
    """The scenario's number of classes as its card states it (or as the dataset fixes
    it), or None."""
    args = scenario.params.get("dataset_args") or {}
    return args.get("n_classes") or FIXED_CLASSES.get(scenario.params["dataset"])


@dataclass(frozen=True)
class Footprint:
    """Image counts (0: unknown before the data loads) and the bytes of the images the
    loader keeps in memory, at their peak while it makes them."""

    train_images: int
    test_images: int
    image_bytes: int


def count(args: dict, key: str, default: int) -> int:
    """``args[key]`` when it is a number, else the loader's default (the loader itself
    refuses a value of the wrong type, with its own message)."""
    value = args.get(key, default)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else default


def footprint(scenario: Card) -> Footprint:
    """The scenario's :class:`Footprint`. The generated dataset is sized by its
    settings (n_classes, images per class, size): each split is made as float32
    noise (4 bytes a value) before it is stored as uint8 (1 byte)."""
    dataset = scenario.params["dataset"]
    args = scenario.params.get("dataset_args") or {}
    if dataset in GENERATED:
        n, size = count(args, "n_classes", 10), count(args, "size", 32)
        train = n * count(args, "train_per_class", 24)
        test = n * count(args, "test_per_class", 8)
        pixels = 3 * size * size
        return Footprint(train, test, pixels * (train + test) + 4 * pixels * max(train, test))
    expected = scenario.params.get("expected") or {}
    train, test = FIXED_IMAGES.get(
        dataset, (expected.get("train_images") or 0, expected.get("test_images") or 0)
    )
    return Footprint(train, test, 0)
