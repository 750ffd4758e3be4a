"""Frozen ViT-B/16 extraction in bf16 and fp32 against this GPU's own matmul peak.

The peak is the best rate of a large square matrix multiply in the same dtype, measured
in this process just before (TF32 off: fp32 means fp32, as in a run). Extraction runs as
the feature store runs it: the runner's batch, ``Backbone.features`` under autocast, and
in bf16 the weights stored in bf16 (what a run does when no method trains the backbone).
"""

from __future__ import annotations

import time

import torch

from bench.gpu_check.sizes import Sizes
from cl_bench.accounting.count import backbone_flops
from cl_bench.backbones import load_backbone
from cl_bench.backbones.base import autocast


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(fn, device: torch.device, repeat: int = 3) -> float:
    """Best wall time of ``repeat`` calls, the device drained before and after."""
    best = float("inf")
    for _ in range(repeat):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_peak_gflops(dtype: torch.dtype, side: int, device: torch.device) -> float:
    a = torch.randn(side, side, dtype=dtype, device=device)
    b = torch.randn(side, side, dtype=dtype, device=device)
    a @ b
    reps = 10
    return 2 * side**3 * reps / seconds(lambda: [a @ b for _ in range(reps)], device) / 1e9


def extraction_rate(precision: str, sizes: Sizes, device: torch.device) -> dict:
    backbone = load_backbone(sizes.backbone, "random", sizes.image_size).to(device)
    backbone.precision = precision
    if precision == "bf16":
        backbone.store_matmul_weights_in_bf16()
    gflops = backbone_flops(backbone) / 1e9
    x = torch.rand(sizes.extract_batch, 3, sizes.image_size, sizes.image_size, device=device)
    batches = max(1, sizes.extract_images // sizes.extract_batch)

    def run() -> None:
        with autocast(device, precision):
            for _ in range(batches):
                backbone.features(x)

    run()
    rate = batches * sizes.extract_batch / seconds(run, device, repeat=2)
    return {"images_per_s": rate, "gflops_per_image": gflops, "achieved_gflops": rate * gflops}


def extraction(sizes: Sizes, device: torch.device) -> dict:
    out = {}
    for precision, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        peak = matmul_peak_gflops(dtype, sizes.matmul, device)
        found = extraction_rate(precision, sizes, device)
        out[precision] = found | {
            "matmul_peak_gflops": peak,
            "share_of_peak": found["achieved_gflops"] / peak,
        }
    return out
