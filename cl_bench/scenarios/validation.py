"""A validation split carved from the training data, for choosing settings without the
test set (``cl-bench run --validation 0.1``, every trial of ``cl-bench tune``).

Per class, a fixed share of the class's training images is held out: the same images
whatever the run seed or class order (the draw is seeded by :data:`VALIDATION_SEED`
alone), so that every trial of a search, and every seed of a trial, is scored on the
same images. The held-out images replace the test split: the run trains on the rest,
evaluates on them after every task exactly as it would on test images (same eval
transform, same order rules), and its record names the split (``config.validation``).
The test images of the dataset are never decoded, extracted or evaluated.
"""

from __future__ import annotations

import hashlib

import torch

from cl_bench.errors import UserError
from cl_bench.scenarios.image_data import ImageData

VALIDATION_SEED = 0
MAX_FRACTION = 0.5


def check_fraction(fraction: float) -> float:
    """A validation share in [0, 0.5] (0: no validation split, the test set is used)."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise UserError(
            f"--validation {fraction!r} is not a number: give the share of each class's "
            "training images to hold out, e.g. --validation 0.1."
        )
    if not 0 <= fraction <= MAX_FRACTION:
        raise UserError(
            f"--validation {fraction} is outside [0, {MAX_FRACTION}]: it is the share of each "
            "class's training images held out for validation (0: none, evaluate on the test "
            "set), e.g. --validation 0.1."
        )
    return float(fraction)


def split_indices(y: torch.Tensor, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(kept, held out) positions of ``y``: per class, ``round(fraction * n)`` images (at
    least one) drawn without replacement by a generator seeded with ``seed``, the classes
    in increasing id; both index lists sorted, so the kept images keep their stored order."""
    gen = torch.Generator().manual_seed(seed)
    held = []
    for c in torch.unique(y).tolist():
        members = torch.nonzero(y == c).squeeze(1)
        n = len(members)
        k = max(1, round(fraction * n))
        if k >= n:
            raise UserError(
                f"--validation {fraction} leaves class {c} no training image ({n} image(s), "
                f"{k} held out): lower --validation, or use a dataset with more images per class."
            )
        held.append(members[torch.randperm(n, generator=gen)[:k]])
    held_out = torch.sort(torch.cat(held)).values
    mask = torch.ones(len(y), dtype=torch.bool)
    mask[held_out] = False
    return torch.nonzero(mask).squeeze(1), held_out


def held_out(data: ImageData, fraction: float, seed: int = VALIDATION_SEED) -> ImageData:
    """``data`` with its test split replaced by ``fraction`` of each class's training
    images (and those images taken out of training); ``data`` itself when ``fraction``
    is 0. The result's fingerprint and identity are the data's with the split's terms."""
    if fraction == 0:
        return data
    kept, val = split_indices(data.train_y, fraction, seed)
    terms = f"validation {fraction!r} seed {seed}"
    return ImageData(
        name=data.name,
        train_x=data.train_x[kept],
        train_y=data.train_y[kept],
        test_x=data.train_x[val],
        test_y=data.train_y[val],
        class_names=data.class_names,
        fingerprint=_joined(data.fingerprint, terms),
        identity=_joined(data.identity, terms),
        validation={"fraction": fraction, "seed": seed},
    )


def _joined(base: str, terms: str) -> str:
    return hashlib.sha256(f"{base}|{terms}".encode()).hexdigest()[:16]
