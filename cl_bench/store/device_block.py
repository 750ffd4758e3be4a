"""A record's ``config.device``: what of the GPU a result's config hash names.

Absent on the CPU (CPU results keep the names they always had); on a GPU exactly
its kind (``cuda``), its architecture (``sm_<major><minor>``, as
:func:`cl_bench.engine.gpu.arch_name` writes it) and the determinism mode of its
kernels, as :func:`cl_bench.engine.environment.gpu_key` makes it. ``status`` and
``report`` read the block (a report labels a row ``cuda sm_90 fast``), so a block
of another shape makes the record invalid rather than a CPU row or a row labelled
with a Python repr.
"""

from __future__ import annotations

import re

KEYS = ("kind", "arch", "deterministic")
KINDS = ("cuda",)
# engine.environment.DETERMINISM, which this layer cannot import (tested equal)
MODES = ("strict", "fast")
ARCH = re.compile(r"sm_\d{2,}")


def device_problems(config: dict) -> list[str]:
    """Everything wrong with ``config.device`` (empty: absent, or well formed)."""
    if "device" not in config:
        return []
    device = config["device"]
    if not isinstance(device, dict):
        return [
            f"config.device is {device!r}, not an object of {', '.join(KEYS)} (absent on the CPU)"
        ]
    if sorted(map(str, device)) != sorted(KEYS):
        return [
            f"config.device has the keys {', '.join(sorted(map(str, device))) or 'none'}, "
            f"not {', '.join(KEYS)}"
        ]
    out = []
    if not (isinstance(device["kind"], str) and device["kind"] in KINDS):
        out.append(f"config.device.kind is {device['kind']!r}, not one of {', '.join(KINDS)}")
    if not (isinstance(device["arch"], str) and ARCH.fullmatch(device["arch"])):
        out.append(
            f"config.device.arch is {device['arch']!r}, not a GPU architecture such as sm_90"
        )
    if not (isinstance(device["deterministic"], str) and device["deterministic"] in MODES):
        out.append(
            f"config.device.deterministic is {device['deterministic']!r}, not one of "
            f"{', '.join(MODES)}"
        )
    return out
