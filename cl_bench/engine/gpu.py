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

ARCH_FORM = re.compile(r"sm_([1-9][0-9]?)([0-9])")  # sm_80, sm_90, sm_100, sm_120


@dataclass(frozen=True)
class GpuType:
    """A GPU as SLURM sites name it in a gres type: its architecture, and the memory
    of its cards in GB, every size it is sold with, smallest first."""

    arch: str
    memory_gb: tuple[int, ...]


# The GPU names SLURM sites give as gres types: a job's GPU is known to the plan only
# through them (:func:`gpu_type`). Memory from NVIDIA's datasheets, as sold (the "GB" of
# a card is GiB: an A100's 40 GB are 42.9e9 bytes, of which the CUDA context takes some).
GPU_TYPES = {
    "p100": GpuType("sm_60", (12, 16)),
    "v100": GpuType("sm_70", (16, 32)),
    "t4": GpuType("sm_75", (16,)),
    "rtx6000": GpuType("sm_75", (24,)),
    "a100": GpuType("sm_80", (40, 80)),
    "a30": GpuType("sm_80", (24,)),
    "a10": GpuType("sm_86", (24,)),
    "a40": GpuType("sm_86", (48,)),
    "a6000": GpuType("sm_86", (48,)),
    "rtx3090": GpuType("sm_86", (24,)),
    "l4": GpuType("sm_89", (24,)),
    "l40": GpuType("sm_89", (48,)),
    "l40s": GpuType("sm_89", (48,)),
    "rtx4090": GpuType("sm_89", (24,)),
    "h100": GpuType("sm_90", (80, 94)),
    "h200": GpuType("sm_90", (141,)),
    "gh200": GpuType("sm_90", (96, 144)),
    "b200": GpuType("sm_100", (180,)),
    "gb200": GpuType("sm_100", (186,)),
}
# The card's memory where a site's type name states it: a100_80gb, a100-sxm4-80gb,
# v100-32g, and MIG slices (a100_3g.40gb, 1g.10gb)
MEMORY_IN_NAME = re.compile(r"(?:^|[-_.])([0-9]+)gb?$")
NATIVE_BF16_MAJOR = 8  # Ampere and newer have bf16 tensor cores

# The fix when the build does not fit the machine: what to install or ask for instead.
OLDER_CUDA_FIX = (
    "install torch's CUDA 12.6 build of the locked versions in the venv "
    "(`.venv/bin/pip install --force-reinstall --no-deps --index-url "
    "https://download.pytorch.org/whl/cu126 torch==2.14.1 torchvision==0.29.1`), "
    "which runs on drivers from 560 on and has sm_50-sm_90 kernels, or run on "
    "the CPU with --device cpu"
)


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
        return (
            f"This machine has {found.present} NVIDIA GPU(s) (/dev/nvidia*), but {build} "
            f"cannot use them.{said} The usual cause is a driver older than this CUDA "
            f"build needs (`nvidia-smi` shows the driver's CUDA version), or a CPU build "
            f"of torch. To use the GPUs, {OLDER_CUDA_FIX}. --device auto does not fall "
            "back to the CPU in silence; nothing was run."
        )
    unsupported = [
        (i, arch_name(c)) for i, c in enumerate(found.capabilities) if not runs_on(c, found.archs)
    ]
    if unsupported:
        which = ", ".join(f"GPU {i} ({arch})" for i, arch in unsupported)
        return (
            f"{which} has no kernels in {build}, which is built for "
            f"{', '.join(found.archs)}. To use it, {OLDER_CUDA_FIX}. Nothing was run."
        )
    return None


def native_bf16(capability: tuple[int, int]) -> bool:
    """bf16 tensor cores (Ampere, sm_80, and newer); older GPUs emulate bf16 slowly."""
    return capability[0] >= NATIVE_BF16_MAJOR


def gpu_type(name: str) -> GpuType | None:
    """The table's entry for a gres type name (``a100``, ``A100``, ``rtx_3090``), also
    where a site adds the form factor or the memory (``a100-sxm4-80gb``,
    ``a100_80gb``); None for a type the table does not know."""
    bare = MEMORY_IN_NAME.sub("", name.lower())
    for key in (bare.replace("-", "").replace("_", ""), re.split(r"[-_.]", bare)[0]):
        if key in GPU_TYPES:
            return GPU_TYPES[key]
    return None


def stated_memory_gb(name: str) -> int | None:
    """The memory a gres type name states (``a100_80gb``: 80), or None."""
    found = MEMORY_IN_NAME.search(name.lower())
    return int(found.group(1)) if found else None


def arch_of_gpu_type(gres: str | None) -> str | None:
    """The architecture of a SLURM gres such as ``gpu:a100:1`` or ``gpu:h100``; None
    when it names no type this table knows."""
    if not gres:
        return None
    parts = gres.lower().split(":")
    if len(parts) < 2 or parts[0] != "gpu":
        return None
    found = gpu_type(parts[1])
    return found.arch if found else None


def is_arch(text: str) -> bool:
    """``sm_`` and the major and minor digits of a compute capability: sm_75, sm_80,
    sm_100; not sm_8 (no minor), sm_080 or sm_90a."""
    return ARCH_FORM.fullmatch(text) is not None


def arch_capability(arch: str) -> tuple[int, int]:
    """``sm_86`` -> (8, 6); ``sm_100`` -> (10, 0). ValueError for what :func:`is_arch`
    refuses."""
    found = ARCH_FORM.fullmatch(arch)
    if found is None:
        raise ValueError(f"not a GPU architecture: {arch!r}")
    return int(found.group(1)), int(found.group(2))


def driver_version() -> str | None:
    """The NVIDIA kernel driver's version (``/proc/driver/nvidia/version``), or None."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            text = f.read()
    except OSError:
        return None
    found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", text)
    return found.group(1) if found else None
