"""Datasets as loaders return them: uint8 tensors in memory, or image files on disk."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from cl_bench.errors import UserError


class FileList:
    """Image files on disk, indexable like a tensor (an int, or an index tensor or
    list giving a sub-list), so that streams are built the same way for files and
    for in-memory images."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, idx):
        if isinstance(idx, int):
            return self.paths[idx]
        if isinstance(idx, slice):
            return FileList(self.paths[idx])
        return FileList([self.paths[i] for i in torch.as_tensor(idx).reshape(-1).tolist()])

    def digest(self, h) -> None:
        """Names, sizes and modification times: cheap, and changes when a file does.
        Every file is stat-ed here anyway, so a missing or empty one is refused here,
        before any run; one that does not decode is refused by the decode check that
        follows (:mod:`cl_bench.scenarios.decode_check`), also before any run."""
        bad = []
        for p in self.paths:
            try:
                st = os.stat(p)
            except OSError as e:
                bad.append(f"{p} ({e.strerror})")
                continue
            if st.st_size == 0:
                bad.append(f"{p} (empty)")
            h.update(f"{p}|{st.st_size}|{st.st_mtime_ns}\n".encode())
        if bad:
            raise UserError(
                f"{len(bad)} image file(s) cannot be used: {', '.join(bad[:5])}"
                f"{' ...' if len(bad) > 5 else ''}. Restore them from the archive "
                "or remove them (`cl-bench data check` lists every bad file)."
            )


@dataclass
class ImageData:
    """A dataset with a fixed train/test split.

    ``*_x`` are uint8 tensors of shape (N, H, W) for greyscale or (N, 3, H, W) for
    colour, or a :class:`FileList` of image files; ``*_y`` are int64 original class
    ids in 0..C-1 (the class order is applied later, by the scenario).
    ``fingerprint`` identifies the contents for the feature cache (files by their
    paths); ``identity`` identifies them for result records (:func:`identity`: files by
    their names inside the dataset, so a moved or copied dataset keeps its results).
    """

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    class_names: list[str]
    fingerprint: str = field(default="")
    identity: str = field(default="")
    # a validation split (:mod:`cl_bench.scenarios.validation`): the test split is held-out
    # training images; ``{"fraction": f, "seed": s}``, recorded in a run's config
    validation: dict | None = None

    def __post_init__(self) -> None:
        if not self.fingerprint:
            self.fingerprint = fingerprint(self.train_x, self.train_y, self.test_x, self.test_y)
        if not self.identity:
            self.identity = identity(self)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def on_disk(self) -> bool:
        return isinstance(self.train_x, FileList)


def fingerprint(*tensors: torch.Tensor | FileList) -> str:
    """Short sha256 over the raw bytes and shapes of the given tensors (file lists:
    names, sizes and modification times)."""
    h = hashlib.sha256()
    for t in tensors:
        if isinstance(t, FileList):
            t.digest(h)
            continue
        t = t.contiguous()
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def identity(data: ImageData) -> str:
    """What a result's config records of its data: in-memory images by their bytes
    (the fingerprint), image files by their names relative to the folder that holds
    them all, sizes and modification times (whole seconds, which copies that keep
    times and every file system agree on), and the class names and labels either way.
    Two datasets that differ in a file, a class folder or a label differ here."""
    h = hashlib.sha256()
    files = [x for x in (data.train_x, data.test_x) if isinstance(x, FileList)]
    if not files:
        h.update(data.fingerprint.encode())
    else:
        paths = [p for f in files for p in f.paths]
        root = os.path.commonpath(paths) if paths else ""
        for x in (data.train_x, data.test_x):
            h.update(b"split\n")
            for p in x.paths:
                st = os.stat(p)
                h.update(f"{os.path.relpath(p, root)}|{st.st_size}|{int(st.st_mtime)}\n".encode())
        for y in (data.train_y, data.test_y):
            h.update(y.contiguous().numpy().tobytes())
    h.update("\n".join(data.class_names).encode())
    return h.hexdigest()[:16]
