"""What a result must record about where it ran, and how to make runs repeatable."""

from __future__ import annotations

import os
import platform
import random
import re
import resource
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from cl_bench.cpu_flags import cpu_kind, detect_cpu_bf16, isa_cap_setting
from cl_bench.engine import gpu
from cl_bench.errors import UserError

DEVICE_FORM = re.compile(r"cuda(:\d+)?")


def check_device_name(name: str) -> None:
    if name not in ("auto", "cpu") and not DEVICE_FORM.fullmatch(name):
        raise UserError(
            f'Unknown device "{name}"; use auto, cpu, cuda or cuda:K (GPU K of '
            "this machine, counted from 0)."
        )


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when this machine has a GPU torch can use, else cpu; a GPU that
    is present but unusable (driver or kernels do not fit the torch build) is an error
    naming the fix, never a silent fall back to the CPU. ``cuda:K`` is GPU K."""
    check_device_name(name)
    if name == "cpu":
        return torch.device("cpu")
    found = gpu.probe()
    if why := gpu.problem(found):
        raise UserError(
            why + ("" if name != "auto" else " Use --device cpu to run on the CPU on purpose.")
        )
    if name == "auto":
        return torch.device("cuda" if found.usable else "cpu")
    if not found.usable:
        raise UserError(
            f"--device {name} was asked for, but PyTorch sees no CUDA GPU here. "
            "Use --device cpu (or auto), or install a CUDA build of torch."
        )
    index = int(name.partition(":")[2] or 0)
    if index >= found.count:
        raise UserError(
            f"--device {name}: this machine has {found.count} GPU(s) that torch "
            f"sees (cuda:0 to cuda:{found.count - 1}); CUDA_VISIBLE_DEVICES "
            "limits which. Give one of them, or --device cuda."
        )
    return torch.device(name)


def device_key(device: torch.device, deterministic: str) -> dict | None:
    """What of the device goes into a result's config hash and the feature-cache key:
    None on the CPU (the keys of every CPU result stay what they were), the kind, the
    GPU architecture and the determinism mode on CUDA (kernels, and so the last digits
    of the numbers, differ between architectures; ``fast`` is not bitwise repeatable).
    The GPU's index is not part of it: cuda:0 and cuda:1 of one node give the same
    numbers."""
    if device.type != "cuda":
        return None
    return gpu_key(gpu.arch_name(torch.cuda.get_device_capability(device)), deterministic)


def gpu_key(arch: str, deterministic: str) -> dict:
    return {"kind": "cuda", "arch": arch, "deterministic": deterministic}


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
        raise UserError(
            f"{BF16_SWITCH}={os.environ[BF16_SWITCH]!r} is not a switch value. "
            "Set it to 1 (treat this CPU as having bf16 matrix units: "
            "--precision auto picks bf16, emulated where the units are absent), "
            "0 (treat it as lacking them: auto picks fp32), or unset it to ask "
            "the CPU."
        )
    return SWITCH_VALUES[raw]


def cpu_has_bf16() -> bool:
    """bf16 matrix units (AVX512-BF16 or AMX) make bf16 autocast several times faster;
    ``$CL_BENCH_CPU_BF16`` overrides what the CPU says (:func:`bf16_switch`)."""
    forced = bf16_switch()
    return detect_cpu_bf16() if forced is None else forced


PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def check_precision_name(name: str) -> None:
    if name not in PRECISIONS:
        raise UserError(
            f'Unknown precision "{name}"; use auto, fp32, bf16 or fp16 (fp16: CUDA '
            "GPUs without bf16, with loss scaling in training)."
        )


def resolve_precision(name: str, device: torch.device) -> str:
    """Precision of the backbone passes: ``auto`` -> bf16 where the hardware has bf16
    matrix units (a GPU from Ampere on, or such a CPU); on an older GPU (T4, V100) fp16,
    with loss scaling where a method trains; else fp32. Emulated bf16 is never picked,
    and refused when asked for on a GPU."""
    check_precision_name(name)
    if device.type == "cuda":
        return cuda_precision(
            name, torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device)
        )
    if name == "fp16":
        raise UserError(
            "--precision fp16 is for CUDA GPUs without bf16 units (T4, V100), "
            "where training scales its loss; on the CPU use fp32, or bf16 where "
            "the CPU has bf16 matrix units (--precision auto picks)."
        )
    if name == "bf16" and not cpu_has_bf16():
        raise UserError(
            "--precision bf16 was asked for, but this CPU has no bf16 matrix units "
            "(AVX512-BF16 or AMX): bf16 would be emulated, roughly 10-20x slower "
            "than fp32. Use --precision fp32, or auto (which picks fp32 here); "
            f"to run the bf16 path anyway (slow), set {BF16_SWITCH}=1."
        )
    if name != "auto":
        return name
    return "bf16" if cpu_has_bf16() else "fp32"


def cuda_precision(name: str, capability: tuple[int, int], gpu_name: str) -> str:
    """:func:`resolve_precision` for a GPU of ``capability``: the one rule for a local
    GPU and for the GPU a SLURM plan names."""
    native = gpu.native_bf16(capability)
    if name == "bf16" and not native:
        raise UserError(
            f"--precision bf16 was asked for, but {gpu_name} "
            f"({gpu.arch_name(capability)}) has no bf16 tensor cores: bf16 would be "
            "emulated, several times slower. Use --precision fp16 (or auto, which "
            "picks it here, with loss scaling in training) or fp32."
        )
    if name != "auto":
        return name
    return "bf16" if native else "fp16"


DETERMINISM = ("strict", "fast")
CUBLAS_WORKSPACE = ":4096:8"  # what cuBLAS needs for bitwise-repeatable results


def check_determinism_name(name: str) -> None:
    if name not in DETERMINISM:
        raise UserError(
            f'Unknown --deterministic "{name}"; use strict (bitwise repeatable '
            "on a GPU: deterministic kernels, cuBLAS workspace, the math attention "
            "backend) or fast (the fastest kernels; the same seed may differ in the "
            "last digits). On the CPU both are deterministic."
        )


def make_deterministic(
    threads: int | None = None, mode: str = "strict", device: torch.device | None = None
) -> dict:
    """Same command, same numbers: deterministic kernels and, when given, a fixed
    intra-op thread count (reduction order can depend on it). On CUDA ``strict`` also
    sets what bitwise repeats need there: ``CUBLAS_WORKSPACE_CONFIG`` (before cuBLAS
    starts), deterministic cuDNN, and scaled-dot-product attention on its math backend
    only (the flash and memory-efficient backwards accumulate in a varying order);
    ``fast`` lets cuDNN pick kernels by timing and attention use every backend. TF32
    stays off in both: fp32 means fp32. Returns what the record says ran."""
    check_determinism_name(mode)
    if threads:
        torch.set_num_threads(threads)
    if device is None or device.type != "cuda":
        torch.use_deterministic_algorithms(True, warn_only=True)
        _DETERMINISM.clear()
        _DETERMINISM.update(mode="strict", asked=mode, device="cpu")
        return determinism()
    strict = mode == "strict"
    if strict:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    torch.use_deterministic_algorithms(strict)
    torch.backends.cudnn.deterministic = strict
    torch.backends.cudnn.benchmark = not strict
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.enable_flash_sdp(not strict)
    torch.backends.cuda.enable_mem_efficient_sdp(not strict)
    torch.backends.cuda.enable_cudnn_sdp(not strict)
    _DETERMINISM.clear()
    _DETERMINISM.update(
        mode=mode,
        asked=mode,
        device="cuda",
        cublas_workspace=os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        attention="math" if strict else "any",
    )
    return determinism()


_DETERMINISM: dict = {}  # what make_deterministic set in this process (torch's state is global)


def determinism() -> dict:
    """What the last :func:`make_deterministic` of this process set, for the record:
    ``mode`` (on the CPU always strict: its kernels are deterministic either way),
    ``asked``, and on CUDA the cuBLAS workspace and attention backends."""
    return dict(_DETERMINISM) or {"mode": "strict", "asked": None, "device": "cpu"}


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
        head = subprocess.run(
            ["git", "rev-parse", "--verify", "-q", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        )
        sha = head.stdout.strip() if head.returncode == 0 else ""
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return (sha + ("-dirty" if dirty.strip() else "")) if sha else None


def versions(device: torch.device, root: Path | None) -> dict:
    import avalanche
    import timm

    from cl_bench import __version__
    from cl_bench.packages import dependency_versions

    return {
        "cl_bench": __version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "timm": timm.__version__,
        "avalanche": avalanche.__version__,
        "numpy": np.__version__,
        "platform": platform.platform(),
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)",
        "git": git_commit(root),
        "device_kind": device.type,
        **gpu_versions(device),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_kind": cpu_kind(),
        "cpu_isa_cap": isa_cap_setting(),
        "cpu_bf16": {"detected": detect_cpu_bf16(), "switch": bf16_switch()},
        "packages": dependency_versions(),
    }


CLEAR_REFS = Path("/proc/self/clear_refs")  # "5" resets the process's peak RSS (Linux)
PROC_STATUS = Path("/proc/self/status")
_rss_reset = False  # whether the last reset_peak_memory reset the resident-set peak


def reset_peak_memory(device: torch.device) -> None:
    """Start a run's peaks from what is resident (and, on a GPU, allocated) now, so that
    each record of a grid carries its own run's peak, not the largest of the runs before
    it in the process. The resident-set peak is reset through ``/proc/self/clear_refs``
    (Linux); where that cannot be written the record says its peak is the process's."""
    global _rss_reset
    try:
        CLEAR_REFS.write_text("5")
        _rss_reset = True
    except OSError:
        _rss_reset = False
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def run_peak_rss() -> int | None:
    """The resident-set peak since :func:`reset_peak_memory` (``VmHWM``), in bytes; None
    where the kernel does not show it."""
    try:
        for line in PROC_STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def gpu_versions(device: torch.device) -> dict:
    """On CUDA: the GPU's architecture, torch's CUDA version and the driver's."""
    if device.type != "cuda":
        return {}
    return {
        "gpu_arch": gpu.arch_name(torch.cuda.get_device_capability(device)),
        "cuda": torch.version.cuda,
        "cuda_driver": gpu.driver_version(),
    }


def peak_memory(device: torch.device) -> dict:
    """Peak RSS of the run (bytes, since :func:`reset_peak_memory` at the run's start;
    ``peak_rss_scope`` "run"), or of the process so far where the kernel cannot reset it
    ("process": in a grid, the largest so far), and, on GPU, CUDA's max allocated and
    reserved since the run's start."""
    rss = run_peak_rss() if _rss_reset else None
    scope = "run" if rss is not None else "process"
    if rss is None:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cuda = device.type == "cuda"
    return {
        "peak_rss_bytes": rss,
        "peak_rss_scope": scope,
        "cuda_max_allocated_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        "cuda_max_reserved_bytes": torch.cuda.max_memory_reserved(device) if cuda else None,
    }
