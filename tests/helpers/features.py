"""The feature store's stand-ins and the feature cache of the shared end-to-end run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch


def e2e_cache(tmp_path_factory) -> Path:
    """The feature cache of the ``e2e_run`` fixture, for tests that read what it
    extracted."""
    path = tmp_path_factory.getbasetemp() / "e2e_cache"
    path.mkdir(exist_ok=True)
    return path


def fake_parts(calls: list):
    """A backbone and data of the store's interface; extraction counts its calls."""

    def extract(backbone, images, device, **kwargs):
        calls.append(len(images))
        return torch.arange(len(images) * 2, dtype=torch.float32).reshape(-1, 2)

    backbone = SimpleNamespace(
        name="fake", weights_digest="0", normalization="none", input_size=8, dim=2, runtime="torch"
    )
    data = SimpleNamespace(
        name="fake",
        fingerprint="f",
        on_disk=False,
        train_x=torch.zeros(5, 8, 8, dtype=torch.uint8),
        test_x=torch.zeros(3, 8, 8, dtype=torch.uint8),
    )
    return extract, backbone, data
