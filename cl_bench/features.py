"""Frozen features, computed once per image and transform and shared.

Features-only methods (TOSCA, SimpleCIL) read nothing but the frozen final
feature, so the backbone runs once per image of a run, not per epoch, seed,
method or stored module. The key names everything the numbers depend on:
backbone + weights digest + dataset fingerprint + split + transform (the eval
transform, or augmented view v of the training images: ``augment_views``).
Features live in memory for one invocation and in an on-disk cache
(``$CL_BENCH_CACHE``, default ``~/.cache/cl-bench/features``) across
invocations.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from cl_bench.atomic import replace_atomically
from cl_bench.backbones.base import Backbone, autocast
from cl_bench.scenarios.augment import AugmentedView
from cl_bench.scenarios.data import FileList, ImageData
from cl_bench.scenarios.transforms import eval_transform


class _Decoded(Dataset):
    """Files under a transform; an :class:`AugmentedView` also gets the index."""

    def __init__(self, files: FileList, transform) -> None:
        self.files, self.transform = files, transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        if isinstance(self.transform, AugmentedView):
            return self.transform(self.files[i], i)
        return self.transform(self.files[i])


def batches(images: torch.Tensor | FileList, transform, batch_size: int, workers: int):
    """Model-input batches of ``images`` under ``transform``; files are decoded in
    ``workers`` processes (a corrupt file stops the run with its path). In-memory
    images reach the transform as (n, C, H, W) chunks, one (C, H, W) image each for
    an :class:`AugmentedView`: never a rank the transform would have to guess."""
    if isinstance(images, FileList):
        loader = DataLoader(_Decoded(images, transform), batch_size=batch_size,
                            num_workers=workers, pin_memory=torch.cuda.is_available())
        yield from loader
        return
    if images.dim() == 3:
        images = images.unsqueeze(1)  # greyscale (N, H, W) -> (N, 1, H, W)
    for start in range(0, len(images), batch_size):
        chunk = images[start:start + batch_size]
        if isinstance(transform, AugmentedView):
            yield torch.stack([transform(x, start + j) for j, x in enumerate(chunk)])
        else:
            yield transform(chunk)


def view_transform(data: ImageData, size: int, view: int | None):
    """The eval transform (``view=None``) or augmented view ``view``."""
    return eval_transform(data.on_disk, size) if view is None else AugmentedView(size, view)


def extract(backbone: Backbone, images: torch.Tensor | FileList, device: torch.device, *,
            transform=None, batch_size: int = 64, precision: str = "fp32",
            desc: str = "features", progress: bool = True, workers: int = 0) -> torch.Tensor:
    """(N, dim) float32 features of ``images`` under ``transform`` (default: the
    eval transform)."""
    if transform is None:
        transform = eval_transform(isinstance(images, FileList), backbone.input_size)
    out = []
    bar = tqdm(total=len(images), desc=desc, unit="img", leave=False, disable=not progress)
    with autocast(device, precision):
        for x in batches(images, transform, batch_size, workers):
            x = x.to(device, non_blocking=True)
            out.append(backbone.features(x).cpu())
            bar.update(len(x))
    bar.close()
    return torch.cat(out) if out else torch.empty(0, backbone.dim)


def cache_dir() -> Path:
    """``$CL_BENCH_CACHE`` or ``~/.cache/cl-bench/features``."""
    return Path(os.environ.get("CL_BENCH_CACHE") or
                Path.home() / ".cache" / "cl-bench" / "features")


def _save_atomic(path: Path, array: np.ndarray) -> None:
    replace_atomically(path, lambda f: np.save(f, array), binary=True)


class FeatureStore:
    """Features keyed by what they depend on, kept in memory for the invocation and
    on disk (fp16, memory-mapped) across invocations, methods and seeds.

    Features always pass through fp16, whether just extracted or read back, so a
    run gives the same numbers with a cold or a warm cache. ``seconds`` is the
    extraction time this store spent; ``hits`` counts disk-cache reads.
    """

    def __init__(self, device: torch.device, *, batch_size: int = 64, precision: str = "fp32",
                 progress: bool = True, workers: int = 0, use_disk: bool = True) -> None:
        self.device, self.batch_size, self.workers = device, batch_size, workers
        self.precision, self.progress, self.use_disk = precision, progress, use_disk
        self._mem: dict[tuple, torch.Tensor] = {}
        self.seconds = 0.0
        self.hits = 0

    def key(self, backbone: Backbone, data: ImageData, split: str,
            view: int | None = None) -> tuple:
        return (backbone.name, backbone.weights_digest, backbone.normalization, data.fingerprint,
                split, view_transform(data, backbone.input_size, view).id, self.precision)

    def path(self, key: tuple) -> Path:
        digest = hashlib.sha256(repr(key).encode()).hexdigest()[:24]
        return cache_dir() / key[0] / f"{digest}.npy"

    def get(self, backbone: Backbone, data: ImageData, split: str,
            view: int | None = None) -> torch.Tensor:
        """(N, dim) features of a split under the eval transform, or of the training
        images' augmented view ``view``."""
        key = self.key(backbone, data, split, view)
        if key not in self._mem:
            self._mem[key] = self._load(backbone, data, split, view)
        return self._mem[key]

    def get_views(self, backbone: Backbone, data: ImageData, views: int) -> torch.Tensor:
        """(N, 1 + views, dim): the training images' eval-transform features, then
        their augmented views 0 .. views-1 (``augment_views``). Memoised as one
        tensor; the views themselves are cached on disk one file each, so a run with
        fewer views reuses a larger run's."""
        key = ("views", views, self.key(backbone, data, "train"))
        if key not in self._mem:
            parts = [self.get(backbone, data, "train")]
            parts += [self._load(backbone, data, "train", v) for v in range(views)]
            self._mem[key] = torch.stack(parts, dim=1)
        return self._mem[key]

    def _load(self, backbone: Backbone, data: ImageData, split: str,
              view: int | None) -> torch.Tensor:
        key = self.key(backbone, data, split, view)
        path = self.path(key)
        if self.use_disk and path.exists():
            try:
                feats = torch.from_numpy(np.load(path, mmap_mode="r").astype(np.float32))
                self.hits += 1
                return feats
            except (OSError, ValueError):
                path.unlink(missing_ok=True)  # unreadable cache entry: recompute it
        t0 = time.perf_counter()
        images = data.train_x if split == "train" else data.test_x
        label = split if view is None else f"{split} view {view}"
        half = extract(backbone, images, self.device,
                       transform=view_transform(data, backbone.input_size, view),
                       batch_size=self.batch_size, precision=self.precision,
                       progress=self.progress, workers=self.workers,
                       desc=f"{backbone.name} features ({data.name} {label})").half()
        if self.use_disk:
            _save_atomic(path, half.numpy())
            _save_atomic(path.with_suffix(".key"), np.array(repr(key)))
        self.seconds += time.perf_counter() - t0
        return half.float()


def cache_info() -> list[str]:
    """One line per cached array, plus the total."""
    root = cache_dir()
    files = sorted(root.glob("*/*.npy")) if root.exists() else []
    lines, total = [], 0
    for f in files:
        total += f.stat().st_size
        shape = np.load(f, mmap_mode="r").shape
        lines.append(f"{f.relative_to(root)}  {shape[0]} x {shape[1]}  "
                     f"{f.stat().st_size / 2**20:.1f} MiB")
    lines.append(f"{len(files)} cached feature arrays, {total / 2**20:.1f} MiB in {root}")
    return lines


def cache_clear() -> int:
    """Delete every cached array; returns how many."""
    root = cache_dir()
    files = list(root.glob("*/*")) if root.exists() else []
    for f in files:
        f.unlink(missing_ok=True)
    return sum(1 for f in files if f.suffix == ".npy")
