"""What this CPU reports of its vector and matrix units (``/proc/cpuinfo``)."""

from __future__ import annotations

import functools
from pathlib import Path

# from the most capable down: the first flag this CPU reports names its kind
KINDS = (("amx_bf16", "amx"), ("avx512_bf16", "avx512_bf16"), ("avx512f", "avx512"),
         ("avx2", "avx2"))
BF16_KINDS = ("amx", "avx512_bf16")


@functools.cache
def _flags() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_kind(flags: str | None = None) -> str:
    """The units this CPU's kernels are chosen for (oneDNN and OpenVINO dispatch on
    them): ``amx`` (AMX-BF16 tiles), ``avx512_bf16``, ``avx512``, ``avx2`` or
    ``baseline``. Kernels for different units round differently: the default run's
    bf16 numbers differ between AMX and AVX512-BF16 CPUs (README). ``flags``: the text
    of /proc/cpuinfo (read when not given)."""
    words = set((_flags() if flags is None else flags).split())
    return next((kind for flag, kind in KINDS if flag in words), "baseline")


def detect_cpu_bf16() -> bool:
    """Whether this CPU reports AVX512-BF16 or AMX-BF16."""
    return cpu_kind() in BF16_KINDS
