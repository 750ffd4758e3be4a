"""What this CPU reports of its vector and matrix units (``/proc/cpuinfo``), held to
the instruction set oneDNN is capped at (``$ONEDNN_MAX_CPU_ISA``) where one is set."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path

# from the most capable down: the first flag this CPU reports names its kind
KINDS = (
    ("amx_bf16", "amx"),
    ("avx512_bf16", "avx512_bf16"),
    ("avx512f", "avx512"),
    ("avx2", "avx2"),
)
BF16_KINDS = ("amx", "avx512_bf16")
RANK = {
    kind: rank for rank, kind in enumerate(("baseline", "avx2", "avx512", "avx512_bf16", "amx"))
}
# oneDNN's cap variable, and the name older releases read
ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


@functools.cache
def _flags() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


# oneDNN's ``cpu_isa_t`` names (oneDNN developer guide, "CPU Dispatcher Control"), each
# with the most capable kind it lets oneDNN dispatch to; ALL and DEFAULT are no cap
ISA_NAMES = {
    "SSE41": "baseline",
    "AVX": "baseline",
    "AVX2": "avx2",
    "AVX2_VNNI": "avx2",
    "AVX2_VNNI_2": "avx2",
    "AVX512_CORE": "avx512",
    "AVX512_CORE_VNNI": "avx512",
    "AVX512_CORE_BF16": "avx512_bf16",
    "AVX512_CORE_FP16": "avx512_bf16",
    "AVX10_1_512": "avx512_bf16",
    "AVX10_2_512": "avx512_bf16",
    "AVX512_CORE_AMX": "amx",
    "AVX10_1_512_AMX": "amx",
    "AVX512_CORE_AMX_FP16": "amx",
    "AVX10_1_512_AMX_FP16": "amx",
    "AVX10_2_512_AMX_2": "amx",
}


def isa_cap(value: str) -> str | None:
    """The most capable kind a ``ONEDNN_MAX_CPU_ISA`` value lets oneDNN (and OpenVINO's
    CPU plugin, which reads it too) dispatch to (:data:`ISA_NAMES`; the name in any
    case, as oneDNN takes it); ``None``: no cap, for ``ALL``, ``DEFAULT``, empty, or any
    other text, which oneDNN ignores (measured on its verbose output: `` AVX2`` with a
    space or ``AVX2_FOO`` leave it at the CPU's own units)."""
    return ISA_NAMES.get(value.upper())


def cpu_kind(flags: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The units this CPU's kernels are chosen for (oneDNN and OpenVINO dispatch on
    them): ``amx`` (AMX-BF16 tiles), ``avx512_bf16``, ``avx512``, ``avx2`` or
    ``baseline``: the most capable unit the CPU reports, or less where
    ``$ONEDNN_MAX_CPU_ISA`` caps oneDNN below it (:func:`isa_cap`; an AMX Xeon held
    to ``AVX2`` runs AVX2 kernels, picks fp32 for ``--precision auto`` and keys its
    feature cache as an AVX2 CPU). Kernels for different units round differently: the
    default run's bf16 numbers differ between AMX and AVX512-BF16 CPUs (README).
    ``flags``: the text of /proc/cpuinfo (read when not given); ``environ``: the
    variables to read the cap from (``os.environ`` when not given)."""
    words = set((_flags() if flags is None else flags).split())
    kind = next((kind for flag, kind in KINDS if flag in words), "baseline")
    cap = isa_cap(isa_cap_setting(environ) or "")
    return kind if cap is None else min(kind, cap, key=RANK.__getitem__)


def isa_cap_setting(environ: Mapping[str, str] | None = None) -> str | None:
    """The value oneDNN reads its cap from: ``ONEDNN_MAX_CPU_ISA``, else
    ``DNNL_MAX_CPU_ISA`` (oneDNN's order), ``None`` when neither is set (a run records
    it beside the kind)."""
    env = os.environ if environ is None else environ
    return next((env[var] for var in ISA_CAPS if env.get(var)), None)


def detect_cpu_bf16() -> bool:
    """Whether this CPU's kernels may use AVX512-BF16 or AMX-BF16 (:func:`cpu_kind`)."""
    return cpu_kind() in BF16_KINDS
