"""What a result must record about where it ran, and how to make runs repeatable."""

from __future__ import annotations

import os
import platform
import random
import resource
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from cl_bench.errors import UserError


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for, but PyTorch sees no CUDA GPU here. "
                        "Use --device cpu (or auto), or install a CUDA build of torch.")
    if name not in ("cpu", "cuda"):
        raise UserError(f'Unknown device "{name}"; use auto, cpu or cuda.')
    return torch.device(name)


BF16_SWITCH = "CL_BENCH_CPU_BF16"
SWITCH_VALUES = {"1": True, "yes": True, "true": True, "0": False, "no": False, "false": False}


def bf16_switch() -> bool | None:
    """What ``$CL_BENCH_CPU_BF16`` makes cl-bench believe about the CPU's bf16 units
    (None: unset, the CPU is asked). ``1`` on a CPU without them runs the bf16 path
    emulated (10-20x slower), ``0`` on a CPU with them runs the fp32 path: the test
    suite runs as the other kind of machine this way."""
    raw = os.environ.get(BF16_SWITCH, "").strip().lower()
    if not raw:
        return None
    if raw not in SWITCH_VALUES:
        raise UserError(f"{BF16_SWITCH}={os.environ[BF16_SWITCH]!r} is not a switch value. "
                        "Set it to 1 (treat this CPU as having bf16 matrix units: "
                        "--precision auto picks bf16, emulated where the units are absent), "
                        "0 (treat it as lacking them: auto picks fp32), or unset it to ask "
                        "the CPU.")
    return SWITCH_VALUES[raw]


def cpu_has_bf16() -> bool:
    """bf16 matrix units (AVX512-BF16 or AMX) make bf16 autocast several times faster;
    ``$CL_BENCH_CPU_BF16`` overrides what the CPU says (:func:`bf16_switch`)."""
    forced = bf16_switch()
    return detect_cpu_bf16() if forced is None else forced


def detect_cpu_bf16() -> bool:
    """Whether this CPU reports AVX512-BF16 or AMX-BF16."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def check_precision_name(name: str) -> None:
    if name not in ("auto", "fp32", "bf16"):
        raise UserError(f'Unknown precision "{name}"; use auto, fp32 or bf16.')


def resolve_precision(name: str, device: torch.device) -> str:
    """Precision of frozen backbone passes: ``auto`` -> bf16 where the hardware
    has bf16 matrix units (CUDA with bf16, or such a CPU), else fp32."""
    check_precision_name(name)
    if name == "bf16" and device.type == "cpu" and not cpu_has_bf16():
        raise UserError("--precision bf16 was asked for, but this CPU has no bf16 matrix units "
                        "(AVX512-BF16 or AMX): bf16 would be emulated, roughly 10-20x slower "
                        "than fp32. Use --precision fp32, or auto (which picks fp32 here); "
                        f"to run the bf16 path anyway (slow), set {BF16_SWITCH}=1.")
    if name in ("fp32", "bf16"):
        return name
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_bf16() else "fp32"


def make_deterministic(threads: int | None = None) -> None:
    """Same command, same numbers on CPU: deterministic kernels and, when given, a
    fixed intra-op thread count (reduction order can depend on it)."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    if threads:
        torch.set_num_threads(threads)


@contextmanager
def threads(n: int | None) -> Iterator[int]:
    """Run a phase with ``n`` intra-op threads (``None``: as configured), then restore
    the previous count. Small per-step work (features-only training and evaluation)
    runs on one thread: OpenMP threads spin-wait for each other, so when another job
    holds a core, a tiny step at two threads waits far beyond its share of the CPU."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def git_commit(root: Path | None) -> str | None:
    """The checkout's commit (``-dirty`` with uncommitted changes); None outside a
    checkout (an installed package: ``root`` None), or without git."""
    if root is None:
        return None
    try:
        head = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=root,
                              capture_output=True, text=True, timeout=5)
        sha = head.stdout.strip() if head.returncode == 0 else ""
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return (sha + ("-dirty" if dirty.strip() else "")) if sha else None


def versions(device: torch.device, root: Path | None) -> dict:
    import avalanche
    import timm

    from cl_bench import __version__
    from cl_bench.packages import dependency_versions
    return {
        "cl_bench": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
        "timm": timm.__version__, "avalanche": avalanche.__version__,
        "numpy": np.__version__, "platform": platform.platform(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else
        f"cpu ({torch.get_num_threads()} threads)", "git": git_commit(root),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16": {"detected": detect_cpu_bf16(), "switch": bf16_switch()},
        "packages": dependency_versions(),
    }


def peak_memory(device: torch.device) -> dict:
    """Peak RSS of this process (bytes) and, on GPU, CUDA max allocated."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cuda = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {"peak_rss_bytes": rss, "cuda_max_allocated_bytes": cuda}
