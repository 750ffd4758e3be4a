"""Deterministic augmented views of training images, for the feature cache.

``augment_views: K`` (features-only methods) trains on K cached augmented
views per training image instead of re-running the backbone every epoch. View
v of image i is the paper's train transform (TOSCA's and PILOT's
``build_transform``): RandomResizedCrop(size, scale (0.05, 1), ratio (3/4, 4/3),
bilinear) then a horizontal flip with probability 1/2, with every random draw
taken from a generator seeded by (v, i). So a view is the same image in every
process, method, seed and invocation, and is computed once and cached; the
run seed still sets the class order and the initialisation.

Works on image files (decoded with PIL, as the image methods see them) and on
in-memory uint8 images (Fashion-MNIST, digits, CIFAR arrays), where the crop is
taken on the stored pixels and resized with antialiasing as
:class:`~cl_bench.scenarios.transforms.ToModelInput` does.
"""

from __future__ import annotations

import hashlib
import math

import torch
import torchvision.transforms.functional as TF
from torchvision.transforms import InterpolationMode

from cl_bench.scenarios.transforms import ToModelInput, load_rgb

SCALE = (0.05, 1.0)
RATIO = (3 / 4, 4 / 3)


def _uniform(low: float, high: float, gen: torch.Generator) -> float:
    return low + (high - low) * float(torch.rand((), generator=gen))


def crop_box(height: int, width: int, gen: torch.Generator) -> tuple[int, int, int, int]:
    """(top, left, h, w) of a random-resized crop: a box with area in SCALE x the
    image's and aspect ratio (log-uniform) in RATIO; after 10 failed draws, the
    largest central box whose ratio is clipped to RATIO."""
    area = height * width
    log_low, log_high = math.log(RATIO[0]), math.log(RATIO[1])
    for _ in range(10):
        target = area * _uniform(*SCALE, gen)
        aspect = math.exp(_uniform(log_low, log_high, gen))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, (), generator=gen))
            left = int(torch.randint(0, width - w + 1, (), generator=gen))
            return top, left, h, w
    ratio = width / height
    if ratio < RATIO[0]:
        w, h = width, round(width / RATIO[0])
    elif ratio > RATIO[1]:
        h, w = height, round(height * RATIO[1])
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class AugmentedView:
    """image (path or uint8 tensor) + its index -> float (3, size, size) in [0, 1]."""

    def __init__(self, size: int, view: int) -> None:
        self.size, self.view = size, view
        self._to_input = ToModelInput(size)

    @property
    def id(self) -> str:
        """Names the transform in result records and cache keys."""
        return f"rrc{self.size}-scale0.05-ratio0.75-1.33-flip-view{self.view}"

    def generator(self, index: int) -> torch.Generator:
        """The draws of image ``index`` in this view (torch's CPU generator keeps 32
        bits of a seed, so (view, index) is hashed to 32 bits)."""
        digest = hashlib.blake2b(f"{self.view}:{index}".encode(), digest_size=4).digest()
        return torch.Generator().manual_seed(int.from_bytes(digest, "little"))

    def __call__(self, image: torch.Tensor | str, index: int) -> torch.Tensor:
        gen = self.generator(index)
        if isinstance(image, str):
            img = load_rgb(image)
            top, left, h, w = crop_box(img.height, img.width, gen)
            img = TF.resized_crop(
                img,
                top,
                left,
                h,
                w,
                [self.size, self.size],
                interpolation=InterpolationMode.BILINEAR,
                antialias=True,
            )
            x = TF.to_tensor(img)
        else:
            top, left, h, w = crop_box(image.shape[-2], image.shape[-1], gen)
            x = self._to_input(image[..., top : top + h, left : left + w])
        if float(torch.rand((), generator=gen)) < 0.5:
            x = x.flip(-1)
        return x
