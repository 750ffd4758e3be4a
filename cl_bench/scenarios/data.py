"""In-memory image datasets: the common currency of all loaders."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch


@dataclass
class ImageData:
    """A dataset with a fixed train/test split, held as uint8 tensors.

    ``*_x`` are uint8 tensors of shape (N, H, W) for greyscale or (N, 3, H, W) for
    colour; ``*_y`` are int64 original class ids in 0..C-1 (the class order is
    applied later, by the scenario). ``fingerprint`` identifies the contents
    (for result records and the feature cache).
    """

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    class_names: list[str]
    fingerprint: str = field(default="")

    def __post_init__(self) -> None:
        if not self.fingerprint:
            self.fingerprint = fingerprint(self.train_x, self.train_y, self.test_x, self.test_y)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)


def fingerprint(*tensors: torch.Tensor) -> str:
    """Short sha256 over the raw bytes and shapes of the given tensors."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.contiguous()
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]
