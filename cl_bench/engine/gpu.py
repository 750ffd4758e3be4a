"""Which GPUs this machine has, whether this torch build can use them, and what
identifies a GPU's numbers (its architecture).

A present GPU that torch cannot use is an error, not a reason to run on the CPU: the
locked torch build (CUDA 13) needs a recent NVIDIA driver and carries kernels for
sm_75 and newer only, so on a cluster with an older driver, or on a V100 (sm_70),
``--device auto`` would otherwise run every method on the CPU for days without a word.
:func:`probe` reads the machine; :func:`problem` says, from what it read, why the GPUs
cannot be used (a pure function, tested with fake probes).
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass

import torch

DEVICE_FILES = "/dev/nvidia[0-9]*"

# The GPU names SLURM sites give as gres types, by architecture: a job's GPU is known
# to the plan only through them (:func:`arch_of_gpu_type`).
ARCH_BY_TYPE = {
    "p100": "sm_60", "v100": "sm_70", "t4": "sm_75", "rtx6000": "sm_75",
    "a100": "sm_80", "a30": "sm_80", "a10": "sm_86", "a40": "sm_86", "a6000": "sm_86",
    "rtx3090": "sm_86", "l4": "sm_89", "l40": "sm_89", "l40s": "sm_89", "rtx4090": "sm_89",
    "h100": "sm_90", "h200": "sm_90", "gh200": "sm_90", "b200": "sm_100", "gb200": "sm_100",
}
NATIVE_BF16_MAJOR = 8  # Ampere and newer have bf16 tensor cores

# The fix when the build does not fit the machine: what to install or ask for instead.
OLDER_CUDA_FIX = ("install torch's CUDA 12.6 build of the locked versions in the venv "
                  "(`.venv/bin/pip install --force-reinstall --no-deps --index-url "
                  "https://download.pytorch.org/whl/cu126 torch==2.14.1 torchvision==0.29.1`), "
                  "which runs on drivers from 560 on and has sm_50-sm_90 kernels, or run on "
                  "the CPU with --device cpu")


@dataclass(frozen=True)
class Probe:
    """What the machine and torch say about GPUs. ``present``: NVIDIA device files
    (``/dev/nvidia0`` ...), seen whatever torch can do; ``usable``: torch's
    ``cuda.is_available()``; ``error``: torch's CUDA initialisation error when not
    usable; ``capabilities``: (major, minor) of each GPU torch sees; ``archs``: the
    kernel architectures of this torch build."""

    present: int
    usable: bool
    count: int
    error: str | None
    capabilities: tuple[tuple[int, int], ...]
    archs: tuple[str, ...]
    torch_cuda: str | None
    names: tuple[str, ...] = ()


def probe() -> Probe:
    """Read the machine (the one seam the tests replace)."""
    present = len(glob.glob(DEVICE_FILES))
    usable = torch.cuda.is_available()
    error = None
    if not usable and present:
        try:
            torch.cuda.init()
        except Exception as e:  # whatever torch says is the diagnosis
            error = " ".join(str(e).split())[:300]
    count = torch.cuda.device_count() if usable else 0
    caps = tuple(torch.cuda.get_device_capability(i) for i in range(count))
    names = tuple(torch.cuda.get_device_name(i) for i in range(count))
    archs = tuple(torch.cuda.get_arch_list()) if usable else ()
    return Probe(present, usable, count, error, caps, archs, torch.version.cuda, names)


def arch_name(capability: tuple[int, int]) -> str:
    return f"sm_{capability[0]}{capability[1]}"


def runs_on(capability: tuple[int, int], archs: tuple[str, ...]) -> bool:
    """Whether a build with kernels ``archs`` runs on a GPU of ``capability``: a cubin
    ``sm_XY`` runs on the same major with minor >= Y; PTX ``compute_XY`` is compiled
    for any GPU of capability >= XY."""
    major, minor = capability
    for arch in archs:
        found = re.fullmatch(r"(sm|compute)_(\d+?)(\d)a?", arch)
        if not found:
            continue
        kind, a_major, a_minor = found.group(1), int(found.group(2)), int(found.group(3))
        if kind == "sm" and a_major == major and a_minor <= minor:
            return True
        if kind == "compute" and (a_major, a_minor) <= (major, minor):
            return True
    return False


def problem(found: Probe) -> str | None:
    """Why the GPUs of this machine cannot be used by this torch build (one
    paragraph), or None: usable GPUs, or none at all."""
    build = f"torch {torch.__version__} (CUDA {found.torch_cuda or 'none: a CPU build'})"
    if found.present and not found.usable:
        said = f" torch says: {found.error}." if found.error else ""
        return (f"This machine has {found.present} NVIDIA GPU(s) (/dev/nvidia*), but {build} "
                f"cannot use them.{said} The usual cause is a driver older than this CUDA "
                f"build needs (`nvidia-smi` shows the driver's CUDA version), or a CPU build "
                f"of torch. To use the GPUs, {OLDER_CUDA_FIX}. --device auto does not fall "
                "back to the CPU in silence; nothing was run.")
    unsupported = [(i, arch_name(c)) for i, c in enumerate(found.capabilities)
                   if not runs_on(c, found.archs)]
    if unsupported:
        which = ", ".join(f"GPU {i} ({arch})" for i, arch in unsupported)
        return (f"{which} has no kernels in {build}, which is built for "
                f"{', '.join(found.archs)}. To use it, {OLDER_CUDA_FIX}. Nothing was run.")
    return None


def native_bf16(capability: tuple[int, int]) -> bool:
    """bf16 tensor cores (Ampere, sm_80, and newer); older GPUs emulate bf16 slowly."""
    return capability[0] >= NATIVE_BF16_MAJOR


def arch_of_gpu_type(gres: str | None) -> str | None:
    """The architecture of a SLURM gres such as ``gpu:a100:1`` or ``gpu:h100``; None
    when it names no type this table knows."""
    if not gres:
        return None
    parts = gres.lower().split(":")
    if len(parts) < 2 or parts[0] != "gpu":
        return None
    return ARCH_BY_TYPE.get(parts[1].replace("-", "").replace("_", ""))


def arch_capability(arch: str) -> tuple[int, int]:
    """``sm_86`` -> (8, 6); ``sm_100`` -> (10, 0)."""
    digits = arch.removeprefix("sm_")
    return int(digits[:-1]), int(digits[-1])


def driver_version() -> str | None:
    """The NVIDIA kernel driver's version (``/proc/driver/nvidia/version``), or None."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            text = f.read()
    except OSError:
        return None
    found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", text)
    return found.group(1) if found else None
