"""What this CPU reports of its matrix units (``/proc/cpuinfo``)."""

from __future__ import annotations

from pathlib import Path


def detect_cpu_bf16() -> bool:
    """Whether this CPU reports AVX512-BF16 or AMX-BF16."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags
