"""What this CPU reports of its vector and matrix units (``/proc/cpuinfo``), held to
the instruction set oneDNN is capped at (``$ONEDNN_MAX_CPU_ISA``) where one is set."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path

# from the most capable down: the first flag this CPU reports names its kind
KINDS = (("amx_bf16", "amx"), ("avx512_bf16", "avx512_bf16"), ("avx512f", "avx512"),
         ("avx2", "avx2"))
BF16_KINDS = ("amx", "avx512_bf16")
RANK = {kind: rank for rank, kind in enumerate(("baseline", "avx2", "avx512", "avx512_bf16",
                                                "amx"))}
# oneDNN's cap variable, and the name older releases read
ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


@functools.cache
def _flags() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def isa_cap(value: str) -> str | None:
    """The most capable kind a ``ONEDNN_MAX_CPU_ISA`` value lets oneDNN (and OpenVINO's
    CPU plugin, which reads it too) dispatch to; ``None``: no cap (``ALL``, ``DEFAULT``,
    empty, or a name oneDNN does not know, which it ignores). The names are oneDNN's
    (its ``cpu_isa_t``): ``*AMX*`` keeps the tiles; ``AVX10_*`` and
    ``AVX512_CORE_BF16``/``_FP16`` keep AVX512-BF16; other ``AVX512*`` keep AVX512;
    ``AVX2*`` AVX2; ``SSE41`` and ``AVX`` less than AVX2."""
    name = value.strip().upper()
    if "AMX" in name:
        return "amx"
    if name.startswith("AVX10") or name in ("AVX512_CORE_BF16", "AVX512_CORE_FP16"):
        return "avx512_bf16"
    if name.startswith("AVX512"):
        return "avx512"
    if name.startswith("AVX2"):
        return "avx2"
    if name in ("SSE41", "AVX"):
        return "baseline"
    return None


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
