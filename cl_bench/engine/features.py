"""Frozen features, computed once per image and transform and shared.

Features-only methods (TOSCA, SimpleCIL) read nothing but the frozen final
feature, so the backbone runs once per image of a run, not per epoch, seed,
method or stored module. The key names everything the numbers depend on:
backbone + weights digest + dataset fingerprint + split + transform (the eval
transform, or augmented view v of the training images: ``augment_views``).
Features live in memory for one invocation and in an on-disk cache
(``$CL_BENCH_CACHE``, default ``~/.cache/cl-bench/features``) across
invocations, whose entries are verified on every read
(:mod:`cl_bench.store.feature_cache`). A cache this process cannot write (a
group's shared, read-only copy) is read as any other; what it lacks is extracted
for the invocation and kept in memory, with a note that says so.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from cl_bench.backbones.base import TORCH_RUNTIME, Backbone, autocast
from cl_bench.backbones.compiled import frozen_features
from cl_bench.cpu_flags import cpu_kind
from cl_bench.errors import UserError
from cl_bench.progress import bar as progress_bar
from cl_bench.scenarios.augment import AugmentedView
from cl_bench.scenarios.image_data import FileList, ImageData
from cl_bench.scenarios.transforms import eval_transform
from cl_bench.store.feature_cache import (
    Damaged,
    cache_dir,
    entry_write_problem,
    read_entry,
    remove_entry,
    sidecar,
    write_entry,
)

# The version of the code that turns images into features (decoding, transforms,
# batching): part of every cache key, so a fix there invalidates the entries it
# made stale. 2: greyscale batches of 3 images were taken for one RGB image.
FEATURES_VERSION = 2


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
    an :class:`AugmentedView`: never a rank the transform would have to guess.

    The loader has a generator of its own: iterating a DataLoader draws its workers'
    base seed from its generator, and the global one would move every later draw of
    the run whenever features are extracted rather than read from the cache."""
    if isinstance(images, FileList):
        loader = DataLoader(
            _Decoded(images, transform),
            batch_size=batch_size,
            num_workers=workers,
            pin_memory=torch.cuda.is_available(),
            generator=torch.Generator().manual_seed(0),
        )
        yield from loader
        return
    if images.dim() == 3:
        images = images.unsqueeze(1)  # greyscale (N, H, W) -> (N, 1, H, W)
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        if isinstance(transform, AugmentedView):
            yield torch.stack([transform(x, start + j) for j, x in enumerate(chunk)])
        else:
            yield transform(chunk)


def view_transform(data: ImageData, size: int, view: int | None):
    """The eval transform (``view=None``) or augmented view ``view``."""
    return eval_transform(data.on_disk, size) if view is None else AugmentedView(size, view)


def extract(
    backbone: Backbone,
    images: torch.Tensor | FileList,
    device: torch.device,
    *,
    transform=None,
    batch_size: int = 64,
    precision: str = "fp32",
    desc: str = "features",
    progress: bool = True,
    workers: int = 0,
) -> torch.Tensor:
    """(N, dim) features of ``images`` under ``transform`` (default: the eval
    transform), in the dtype the feature pass gives (float32; bf16 from torch's bf16
    autocast).

    The features go into one array allocated at the first batch, not into one small
    tensor per batch kept until the end: kept between the large transient buffers of
    successive batches (32 images at 224 px are 19 MB), those small blocks fragment the
    C heap so that no freed buffer is reused, and the process grew by one batch of
    images per batch (bench figure default-run-memory)."""
    if transform is None:
        transform = eval_transform(isinstance(images, FileList), backbone.input_size)
    out, done = None, 0
    bar = progress_bar(total=len(images), desc=desc, unit="img", enabled=progress)
    with autocast(device, precision):
        for x in batches(images, transform, batch_size, workers):
            x = x.to(device, non_blocking=True)
            features = frozen_features(backbone, x)
            if out is None:
                out = torch.empty((len(images), *features.shape[1:]), dtype=features.dtype)
            out[done : done + len(features)] = features
            done += len(features)
            del features  # released before the next batch's buffers are made
            bar.update(len(x))
    bar.close()
    if done != len(images):
        raise RuntimeError(f"{desc}: the batches held {done} images of {len(images)}")
    return out if out is not None else torch.empty(0, backbone.dim)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class NonFiniteFeatures(UserError):
    """Extracted features that are not finite: no method could be scored on them, so the
    run fails (its ``.failed`` record names why) instead of reporting chance numbers. A
    user's error, not a bug: broken weights, or a first-session adaptation (APER,
    RanPAC) that a setting made diverge."""


class FeatureStore:
    """Features keyed by what they depend on, kept in memory for the invocation and
    on disk (fp16, memory-mapped) across invocations, methods and seeds.

    Features always pass through fp16, whether just extracted or read back, so a
    run gives the same numbers with a cold or a warm cache. ``seconds`` is the
    extraction time this store spent; ``hits`` counts disk-cache reads. A damaged
    disk entry is reported through ``warn`` (one line), deleted and recomputed; in a
    cache that cannot be written it is left as it is, and what is recomputed there
    stays in memory (reported through ``warn`` too).
    """

    def __init__(
        self,
        device: torch.device,
        *,
        batch_size: int = 64,
        precision: str = "fp32",
        progress: bool = True,
        workers: int = 0,
        use_disk: bool = True,
        warn: Callable[[str], None] = _stderr,
        device_key: dict | None = None,
    ) -> None:
        self.device, self.batch_size, self.workers = device, batch_size, workers
        self.device_key = device_key
        self.warn = warn
        self.precision, self.progress, self.use_disk = precision, progress, use_disk
        self._mem: dict[tuple, torch.Tensor] = {}
        self.seconds = 0.0
        self.hits = 0

    def key(
        self, backbone: Backbone, data: ImageData, split: str, view: int | None = None
    ) -> tuple:
        """What the features depend on. Also what computes them: the compiled runtime
        (``backbone.runtime``; absent for torch eager); on the CPU its kind
        (:func:`~cl_bench.cpu_flags.cpu_kind`: AMX, AVX512-BF16, AVX512, AVX2), whose
        kernels round differently (the default run's bf16 numbers differ between AMX
        and AVX512-BF16), so that a cache shared by the nodes of a mixed cluster gives
        each kind its own features and a run's numbers never depend on which node
        extracted first; on a GPU its kind and architecture (``device_key``), so that
        features extracted on the CPU are never read by a GPU run, nor the other way
        round."""
        key = (
            backbone.name,
            backbone.weights_digest,
            backbone.normalization,
            data.fingerprint,
            split,
            view_transform(data, backbone.input_size, view).id,
            self.precision,
            f"features-v{FEATURES_VERSION}",
        )
        if backbone.runtime != TORCH_RUNTIME:
            key = (*key, ("runtime", backbone.runtime))
        if self.device.type == "cpu":
            key = (*key, ("cpu", cpu_kind()))
        if self.device_key is None:
            return key
        return (*key, tuple(sorted(self.device_key.items())))

    def path(self, key: tuple) -> Path:
        digest = hashlib.sha256(repr(key).encode()).hexdigest()[:24]
        return cache_dir() / key[0] / f"{digest}.npy"

    def get(
        self, backbone: Backbone, data: ImageData, split: str, view: int | None = None
    ) -> torch.Tensor:
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

    def _load(
        self, backbone: Backbone, data: ImageData, split: str, view: int | None
    ) -> torch.Tensor:
        key = self.key(backbone, data, split, view)
        path = self.path(key)
        images = data.train_x if split == "train" else data.test_x
        if (
            self.use_disk
            and (cached := self._read(path, repr(key), (len(images), backbone.dim))) is not None
        ):
            self.hits += 1
            return cached
        t0 = time.perf_counter()
        label = split if view is None else f"{split} view {view}"
        half = extract(
            backbone,
            images,
            self.device,
            transform=view_transform(data, backbone.input_size, view),
            batch_size=self.batch_size,
            precision=self.precision,
            progress=self.progress,
            workers=self.workers,
            desc=f"{backbone.name} features ({data.name} {label})",
        ).half()
        if bad := int((~torch.isfinite(half)).sum()):
            raise NonFiniteFeatures(
                f"{backbone.name} features of {data.name} {label} hold {bad} NaN or inf "
                f"values of {half.numel()}: the backbone's weights are broken, or a feature "
                "exceeds fp16's range (65504). Nothing was cached and the run is not scored; "
                "check the weights file, or the backbone's output on one image. A backbone "
                "adapted on the first task (named <backbone>+adapter, +finetune or +bn) "
                "diverged there: lower its learning rate or weight decay."
            )
        if self.use_disk:
            self._write(path, repr(key), half, f"{backbone.name} features of {data.name} {label}")
        self.seconds += time.perf_counter() - t0
        return half.float()

    def _write(self, path: Path, key: str, half: torch.Tensor, what: str) -> None:
        """Cache the entry, or, where the cache cannot be written, say that ``what``
        (the features) stay in this invocation's memory."""
        problem = entry_write_problem(path)
        if problem is None:
            write_entry(path, key, half.numpy())
            return
        self.warn(
            f"note: the feature cache {cache_dir()} cannot be written ({problem}): "
            f"{what} were extracted for this invocation only. To share them, run the "
            "command once where the cache can be written."
        )

    def _read(self, path: Path, key: str, shape: tuple[int, int]) -> torch.Tensor | None:
        """The verified entry at ``path`` as float32, or None: a miss, or a damaged
        entry (reported, and deleted where the cache can be written; the caller
        recomputes it)."""
        if not path.exists() and not sidecar(path).exists():
            return None
        try:
            array = read_entry(path, key, shape)
        except Damaged as e:
            if entry_write_problem(path) is not None:
                self.warn(f"warning: feature cache entry {path} is damaged ({e}); recomputing it")
                return None
            self.warn(
                f"warning: feature cache entry {path} is damaged ({e}); deleted, recomputing it"
            )
            remove_entry(path)
            return None
        return torch.from_numpy(array.astype(np.float32))
