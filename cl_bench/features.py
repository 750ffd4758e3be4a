"""Frozen features, computed once per image and transform and shared.

Features-only methods (TOSCA, SimpleCIL) read nothing but the frozen final
feature, so the backbone runs once per image of a run, not per epoch, seed,
method or stored module. The key names everything the numbers depend on:
backbone + weights digest + dataset fingerprint + split + transform + view.
Here the store lives for one invocation; an on-disk cache plugs in behind
``FeatureStore.get`` without changing its callers.
"""

from __future__ import annotations

import contextlib
import time

import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from cl_bench.backbones.base import Backbone
from cl_bench.scenarios.data import FileList, ImageData
from cl_bench.scenarios.transforms import ToModelInput, eval_transform


def autocast(device: torch.device, precision: str):
    """bf16 autocast for frozen passes when asked; fp32 otherwise."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class _Decoded(Dataset):
    def __init__(self, files: FileList, transform) -> None:
        self.files, self.transform = files, transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(self.files[i])


def batches(images: torch.Tensor | FileList, size: int, batch_size: int, workers: int):
    """Model-input batches of ``images`` under the eval transform; files are decoded
    in ``workers`` processes (a corrupt file stops the run with its path)."""
    if isinstance(images, FileList):
        loader = DataLoader(_Decoded(images, eval_transform(True, size)),
                            batch_size=batch_size, num_workers=workers)
        yield from loader
        return
    to_input = ToModelInput(size)
    for start in range(0, len(images), batch_size):
        yield to_input(images[start:start + batch_size])


def extract(backbone: Backbone, images: torch.Tensor | FileList, device: torch.device, *,
            batch_size: int = 64, precision: str = "fp32", desc: str = "features",
            progress: bool = True, workers: int = 0) -> torch.Tensor:
    """(N, dim) float32 features of ``images`` under the eval transform."""
    out = []
    bar = tqdm(total=len(images), desc=desc, unit="img", leave=False, disable=not progress)
    with autocast(device, precision):
        for x in batches(images, backbone.input_size, batch_size, workers):
            x = x.to(device, non_blocking=True)
            out.append(backbone.features(x).cpu())
            bar.update(len(x))
    bar.close()
    return torch.cat(out) if out else torch.empty(0, backbone.dim)


class FeatureStore:
    """Features keyed by what they depend on; ``seconds`` accumulates extraction time."""

    def __init__(self, device: torch.device, *, batch_size: int = 64, precision: str = "fp32",
                 progress: bool = True, workers: int = 0) -> None:
        self.device, self.batch_size, self.workers = device, batch_size, workers
        self.precision, self.progress = precision, progress
        self._mem: dict[tuple, torch.Tensor] = {}
        self.seconds = 0.0

    def key(self, backbone: Backbone, data: ImageData, split: str, view: int = 0) -> tuple:
        return (backbone.name, backbone.weights_digest, backbone.normalization, data.fingerprint,
                split, eval_transform(data.on_disk, backbone.input_size).id, self.precision, view)

    def get(self, backbone: Backbone, data: ImageData, split: str) -> torch.Tensor:
        key = self.key(backbone, data, split)
        if key not in self._mem:
            t0 = time.perf_counter()
            images = data.train_x if split == "train" else data.test_x
            self._mem[key] = extract(backbone, images, self.device, batch_size=self.batch_size,
                                     precision=self.precision, progress=self.progress,
                                     workers=self.workers,
                                     desc=f"{backbone.name} features ({data.name} {split})")
            self.seconds += time.perf_counter() - t0
        return self._mem[key]
