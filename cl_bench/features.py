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
from tqdm.auto import tqdm

from cl_bench.backbones.base import Backbone
from cl_bench.scenarios.data import ImageData
from cl_bench.scenarios.transforms import ToModelInput


def autocast(device: torch.device, precision: str):
    """bf16 autocast for frozen passes when asked; fp32 otherwise."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def extract(backbone: Backbone, images: torch.Tensor, device: torch.device, *,
            batch_size: int = 64, precision: str = "fp32", desc: str = "features",
            progress: bool = True) -> torch.Tensor:
    """(N, dim) float32 features of uint8 ``images`` with the eval transform."""
    to_input = ToModelInput(backbone.input_size)
    out = []
    bar = tqdm(total=len(images), desc=desc, unit="img", leave=False, disable=not progress)
    with autocast(device, precision):
        for start in range(0, len(images), batch_size):
            x = to_input(images[start:start + batch_size]).to(device)
            out.append(backbone.features(x).cpu())
            bar.update(len(x))
    bar.close()
    return torch.cat(out) if out else torch.empty(0, backbone.dim)


class FeatureStore:
    """Features keyed by what they depend on; ``seconds`` accumulates extraction time."""

    def __init__(self, device: torch.device, *, batch_size: int = 64, precision: str = "fp32",
                 progress: bool = True) -> None:
        self.device, self.batch_size = device, batch_size
        self.precision, self.progress = precision, progress
        self._mem: dict[tuple, torch.Tensor] = {}
        self.seconds = 0.0

    def key(self, backbone: Backbone, data: ImageData, split: str, view: int = 0) -> tuple:
        return (backbone.name, backbone.weights_digest, data.fingerprint, split,
                ToModelInput(backbone.input_size).id, self.precision, view)

    def get(self, backbone: Backbone, data: ImageData, split: str) -> torch.Tensor:
        key = self.key(backbone, data, split)
        if key not in self._mem:
            t0 = time.perf_counter()
            images = data.train_x if split == "train" else data.test_x
            self._mem[key] = extract(backbone, images, self.device, batch_size=self.batch_size,
                                     precision=self.precision, progress=self.progress,
                                     desc=f"{backbone.name} features ({data.name} {split})")
            self.seconds += time.perf_counter() - t0
        return self._mem[key]
