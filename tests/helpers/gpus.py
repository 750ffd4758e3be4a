"""GPUs faked at the seams torch offers (``torch.cuda.*`` and the NVIDIA device files),
on a machine without one."""

from __future__ import annotations

import torch

from cl_bench.engine import gpu

CU130_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120")


def index(device: int | str | torch.device | None) -> int:
    """A GPU's index as torch.cuda's functions take it (an int, "cuda:1", a device)."""
    if isinstance(device, (str, torch.device)):
        return torch.device(device).index or 0
    return device or 0


def fake_gpus(
    monkeypatch,
    caps: list[tuple[int, int]],
    *,
    usable: bool = True,
    present: int | None = None,
    error: str = "The NVIDIA driver on your system is too old (found version 12020).",
    names: list[str] | None = None,
) -> None:
    """GPUs of the given capabilities, as torch and the device files would show them."""
    present = len(caps) if present is None else present
    names = names or [f"Fake GPU {i}" for i in range(len(caps))]
    monkeypatch.setattr(
        gpu.glob, "glob", lambda pattern: [f"/dev/nvidia{i}" for i in range(present)]
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: usable)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(caps) if usable else 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: caps[index(i)])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: names[index(i)])
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(CU130_ARCHS))

    def init() -> None:
        raise RuntimeError(error)

    monkeypatch.setattr(torch.cuda, "init", init)
