"""The machine part: what the GPU is and what cl-bench decides on it."""

from __future__ import annotations

import torch

from cl_bench.engine import gpu
from cl_bench.engine.environment import resolve_device, resolve_precision


def machine(device: torch.device) -> dict:
    """GPU name, architecture, driver, torch and its CUDA, and the decisions of
    ``--device auto`` and ``--precision auto`` on this machine."""
    auto = resolve_device("auto")
    out = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device_auto": str(auto),
        "precision_auto": resolve_precision("auto", device),
        "device": str(device),
        "cpu_threads": torch.get_num_threads(),
    }
    if device.type != "cuda":
        return out | {"gpu": None, "arch": None, "driver": None}
    free, total = torch.cuda.mem_get_info(device)
    props = torch.cuda.get_device_properties(device)
    return out | {
        "gpu": torch.cuda.get_device_name(device),
        "arch": gpu.arch_name(torch.cuda.get_device_capability(device)),
        "driver": gpu.driver_version(),
        "gpus": torch.cuda.device_count(),
        "multiprocessors": props.multi_processor_count,
        "memory_total_gb": total / 1e9,
        "memory_free_gb": free / 1e9,
        "torch_archs": torch.cuda.get_arch_list(),
    }
