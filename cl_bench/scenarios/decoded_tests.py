"""Test images on disk, decoded once per run and kept, instead of once per evaluation.

A run evaluates the test images of the classes seen so far after every task
(:attr:`cl_bench.scenarios.stream.Stream.seen_test`), so with files each test image
would be decoded, resized and cropped up to T times, on the loader's workers, while
the model waits. The eval transform (Resize(size/0.875, bicubic) + CenterCrop(size) +
ToTensor, :class:`~cl_bench.scenarios.transforms.FileTransform`) is deterministic and
ToTensor only divides the uint8 crop by 255, so the uint8 crop is decoded once, in
parallel workers, and :class:`DecodedEval` turns it into the very floats ToTensor
gives: the same bits, the same transform id, the same result file names.

Memory: ``bytes = N x 3 x size^2`` (uint8) for N test images at the backbone's input
size (:func:`decoded_bytes`; ImageNet-R's 6,000 at 224 px: 0.90 GB), held while the
dataset is (the decoded tensor is kept per file list, for every method and seed of an
invocation, and dropped with the data).
"""

from __future__ import annotations

import weakref

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T

from cl_bench.contract.loading import usable_cpus
from cl_bench.progress import bar
from cl_bench.scenarios.image_data import FileList, ImageData
from cl_bench.scenarios.transforms import FileTransform, eval_transform, load_rgb

BATCH = 64  # images a worker decodes per batch it sends back

_decoded: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # FileList -> {size: x}


def decoded_bytes(n_images: int, size: int) -> int:
    """Bytes of ``n_images`` decoded test images at ``size`` px: N x 3 x size^2."""
    return n_images * 3 * size * size


def crop_pipeline(size: int) -> T.Compose:
    """The eval transform's PIL steps, without its final ToTensor: a file's uint8 crop
    (taken from :class:`FileTransform` itself, so the steps cannot drift apart)."""
    steps = FileTransform(size, train=False).pipeline.transforms
    if not isinstance(steps[-1], T.ToTensor):
        raise TypeError(f"the eval transform no longer ends in ToTensor: {steps}")
    return T.Compose(steps[:-1])


class _Crops(Dataset):
    """uint8 (3, size, size) crops of image files under the eval transform's steps."""

    def __init__(self, files: FileList, size: int) -> None:
        self.files, self.crop = files, crop_pipeline(size)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        pixels = np.array(self.crop(load_rgb(self.files[i])), dtype=np.uint8)  # (H, W, 3)
        return torch.from_numpy(pixels).permute(2, 0, 1)


def decode_files(
    files: FileList,
    size: int,
    *,
    workers: int | None = None,
    progress: bool = True,
    desc: str = "decoding test images",
) -> torch.Tensor:
    """(N, 3, size, size) uint8: every file decoded once under the eval transform's
    steps, by ``workers`` processes (default: every usable CPU, while the main process
    only gathers; 0: in the main process). The loader has a generator of its own, so
    decoding (or finding the images decoded already) leaves the global generator where
    it was."""
    workers = usable_cpus() if workers is None else workers
    out = torch.empty((len(files), 3, size, size), dtype=torch.uint8)
    loader = DataLoader(
        _Crops(files, size),
        batch_size=BATCH,
        num_workers=workers,
        generator=torch.Generator().manual_seed(0),
    )
    shown = bar(total=len(files), desc=desc, unit="img", enabled=progress)
    start = 0
    for batch in loader:
        out[start : start + len(batch)] = batch
        start += len(batch)
        shown.update(len(batch))
    shown.close()
    return out


def decoded_tests(files: FileList, size: int, progress: bool = True) -> torch.Tensor:
    """:func:`decode_files` of a dataset's test files, once per file list and size."""
    per_size = _decoded.setdefault(files, {})
    if size not in per_size:
        per_size[size] = decode_files(
            files, size, progress=progress, desc=f"decoding {len(files)} test images"
        )
    return per_size[size]


class DecodedEval:
    """The eval transform of a run whose test images are decoded: a uint8 crop (or a
    batch of them) -> float in [0, 1], as ToTensor divides it; a path (a training
    image, evaluated by a method's own pass) -> :class:`FileTransform`'s eval output.
    Its id is the file transform's: the numbers are the same."""

    def __init__(self, size: int) -> None:
        self.files = FileTransform(size, train=False)

    @property
    def id(self) -> str:
        return self.files.id

    def __call__(self, x):
        if isinstance(x, torch.Tensor):
            return x.to(torch.get_default_dtype()).div(255)
        return self.files(x)


def eval_inputs(data: ImageData, size: int, progress: bool = True):
    """(test images, eval transform) of an image method's run: decoded once with
    :class:`DecodedEval` for files on disk; the tensors in memory and their transform
    otherwise."""
    if not data.on_disk:
        return data.test_x, eval_transform(False, size)
    return decoded_tests(data.test_x, size, progress), DecodedEval(size)
