"""ImageFolder trees of small images on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def image_tree(root: Path, per_class: int = 2) -> Path:
    """A 2-class ImageFolder tree of 8x8 PNGs in PILOT's layout."""
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for c in ("a", "b"):
            (root / split / c).mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / c / f"{i}.png")
    return root


def one_image_classes(root: Path, n_classes: int) -> Path:
    """An ImageFolder tree of ``n_classes`` classes of one 8x8 PNG each in train and test
    (what a dry run of a scenario whose card states its class count reads)."""
    pixels = Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8))
    for split in ("train", "test"):
        for c in range(n_classes):
            (root / split / f"c{c:03d}").mkdir(parents=True, exist_ok=True)
            pixels.save(root / split / f"c{c:03d}" / "0.png")
    return root


def make_tree(root: Path, classes: list[str], n_train: int = 3, n_test: int = 2) -> Path:
    rng = np.random.RandomState(0)
    for split, n in (("train", n_train), ("test", n_test)):
        for k, c in enumerate(classes):
            (root / split / c).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                img = (rng.rand(20, 24, 3) * 50 + 40 * k).astype(np.uint8)
                Image.fromarray(img).save(root / split / c / f"img{i}.jpg")
    return root
