"""Images -> model input: float (3, size, size) in [0, 1], no mean/std (the
backbone normalises when its weights need it).

In-memory uint8 tensors (Fashion-MNIST, digits, synthetic, CIFAR) go through
:class:`ToModelInput`, batched or per image. Image files (PILOT's ImageFolder
layout) go through the paper's PIL pipelines: test Resize(size/0.875, bicubic)
+ CenterCrop(size), train RandomResizedCrop(size, scale (0.05, 1)) +
HorizontalFlip; a file that cannot be decoded stops the run with its path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from PIL import Image
from torchvision import transforms as T

from cl_bench.errors import UserError


class ToModelInput:
    """uint8 image(s) -> float (…, 3, size, size) in [0, 1]; greyscale repeated to
    3 channels, bilinear resize with antialiasing.

    The input's rank says what it is, never its sizes: (N, C, H, W) is a batch,
    (C, H, W) one image, (H, W) one greyscale image, with C = 1 or 3. (Guessing
    from sizes once took a batch of three 8x8 greyscale digits for one RGB image.)
    """

    def __init__(self, size: int) -> None:
        self.size = size

    @property
    def id(self) -> str:
        """Names the transform in result records and cache keys."""
        return f"to3ch-resize{self.size}-bilinear-aa"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() not in (2, 3, 4) or (x.dim() > 2 and x.shape[-3] not in (1, 3)):
            raise ValueError(
                f"ToModelInput takes (H, W), (C, H, W) or (N, C, H, W) with C = 1 "
                f"or 3; got shape {tuple(x.shape)}"
            )
        single = x.dim() < 4
        if x.dim() == 2:
            x = x[None]  # (1, H, W)
        if single:
            x = x[None]  # a batch of one
        x = x.float().div_(255.0)
        if x.shape[-1] != self.size or x.shape[-2] != self.size:
            # per channel, so a greyscale image is resized once, before it is repeated
            x = F.interpolate(
                x, size=(self.size, self.size), mode="bilinear", align_corners=False, antialias=True
            )
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        return x[0] if single else x


def decode(path: str) -> Image.Image:
    """Decode an image file fully, or raise what PIL raises for it."""
    with Image.open(path) as img:
        return img.convert("RGB")


def decode_problem(path: str) -> str | None:
    """Why ``path`` does not decode (the exception, in one line), or None."""
    try:
        decode(path)
    except Exception as e:  # a file is data: whatever PIL raises on it, it is unusable
        return f"{type(e).__name__}: {e}"
    return None


def load_rgb(path: str) -> Image.Image:
    """Decode an image file fully, or stop with its path (never a silent skip)."""
    try:
        return decode(path)
    except Exception as e:  # as in decode_problem
        raise UserError(
            f"Cannot read image {path} ({type(e).__name__}: {e}). Replace or "
            "delete the file; `cl-bench data check --scenario ...` lists every "
            "unreadable file of a dataset."
        ) from None


class IndexedPath(str):
    """An image file's path that also carries the sample's index in its dataset: the
    seed of its random training crop (:func:`sample_seed`)."""

    index: int

    def __new__(cls, path: str, index: int) -> IndexedPath:
        found = super().__new__(cls, path)
        found.index = index
        return found


SEED_STRIDE = 1_000_003  # a prime: base seeds and indices never collide in the sum


def sample_seed(path: str) -> int | None:
    """The seed of sample ``path.index``'s random transform in a loader worker: the
    loader's base seed (worker seeds are base + worker id) and the index, so a crop does
    not depend on which worker, or how many, decode it; None in the main process or for
    a plain path (the global generator draws, as before)."""
    info = torch.utils.data.get_worker_info()
    if info is None or not isinstance(path, IndexedPath):
        return None
    return ((info.seed - info.id) * SEED_STRIDE + path.index) % 2**63


class FileTransform:
    """path -> float (3, size, size): decode, then the paper's train or test pipeline.
    The training pipeline's random draws come from the sample's own seed where it has
    one (:func:`sample_seed`)."""

    def __init__(self, size: int, train: bool) -> None:
        self.size, self.train = size, train
        if train:
            self.pipeline = T.Compose(
                [
                    T.RandomResizedCrop(size, scale=(0.05, 1.0), ratio=(3 / 4, 4 / 3)),
                    T.RandomHorizontalFlip(),
                    T.ToTensor(),
                ]
            )
        else:
            self.pipeline = T.Compose(
                [
                    T.Resize(round(size / 0.875), interpolation=T.InterpolationMode.BICUBIC),
                    T.CenterCrop(size),
                    T.ToTensor(),
                ]
            )

    @property
    def id(self) -> str:
        if self.train:
            return f"rrc{self.size}-scale0.05-flip-sampleseed"
        return f"resize{round(self.size / 0.875)}-bicubic-crop{self.size}"

    def __call__(self, path: str) -> torch.Tensor:
        image = load_rgb(path)
        seed = sample_seed(path) if self.train else None
        if seed is None:
            return self.pipeline(image)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.pipeline(image)


def eval_transform(on_disk: bool, size: int):
    return FileTransform(size, train=False) if on_disk else ToModelInput(size)


def train_transform(on_disk: bool, size: int):
    return FileTransform(size, train=True) if on_disk else ToModelInput(size)
