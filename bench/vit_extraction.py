"""Figure vit-extraction: frozen ViT-B/16 feature extraction on this CPU, fp32 vs bf16 autocast (and
bf16 autocast over bf16-stored weights, what the runner uses when no method
trains the backbone), against the 35.13 GFLOPs per image; and the accuracy
change bf16 makes on the embedded fmnist (TOSCA, SimpleCIL on EfficientNet-Lite0).

The share of the peak is given twice: against the 2,300 GFLOP/s of docs/references.md section 6
(measured on a CPU with AMX tile units) and against this CPU's own matrix-multiply
peak, measured here with the GEMM shape of ViT-B's MLP at batch 16."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from bench.common import timed
from cl_bench.backbones import load_backbone
from cl_bench.backbones.base import autocast

BF16_PEAK_GFLOPS = 2300.0  # docs/references.md section 6, 2 cores
VIT_B_GFLOPS = 35.13


def gemm_gflops(dtype: torch.dtype, m: int = 16 * 197, k: int = 768, n: int = 3072) -> float:
    """Best sustained matrix-multiply rate of this CPU in ``dtype`` (GFLOP/s)."""
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    a @ b
    return 2 * m * k * n * 5 / timed(lambda: [a @ b for _ in range(5)], repeat=3) / 1e9


def images_per_second(
    precision: str, batch: int = 16, batches: int = 3, bf16_weights: bool = False
) -> float:
    backbone = load_backbone("vit_base_patch16_224", "random")
    backbone.precision = precision
    if bf16_weights:
        backbone.store_matmul_weights_in_bf16()
    x = torch.rand(batch, 3, 224, 224)

    def run():
        with autocast("cpu", precision):
            for _ in range(batches):
                backbone.features(x)

    run()
    return batch * batches / timed(run, repeat=2)


def fmnist_accuracy(precision: str) -> dict:
    import cl_bench

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CL_BENCH_CACHE"] = str(Path(tmp) / "cache")
        runs = cl_bench.run(
            ["tosca", "simplecil"], precision=precision, out=Path(tmp) / "out", echo=None
        )
        return {r.method: r.last_acc for r in runs}


def main() -> dict:
    peaks = {"fp32": gemm_gflops(torch.float32), "bf16": gemm_gflops(torch.bfloat16)}
    out = {"gemm_peak_gflops": peaks}
    for label, precision, weights in (
        ("fp32", "fp32", False),
        ("bf16", "bf16", False),
        ("bf16 + bf16 weights", "bf16", True),
    ):
        ips = images_per_second(precision, bf16_weights=weights)
        out[label] = {
            "images_per_s": ips,
            "share_of_reference_bf16_peak": ips * VIT_B_GFLOPS / BF16_PEAK_GFLOPS,
            "share_of_this_cpu_peak": ips * VIT_B_GFLOPS / peaks[precision],
        }
    acc32, acc16 = fmnist_accuracy("fp32"), fmnist_accuracy("bf16")
    out["fmnist_last_acc"] = {
        m: {"fp32": acc32[m], "bf16": acc16[m], "delta": acc16[m] - acc32[m]} for m in acc32
    }
    return out


if __name__ == "__main__":
    import json

    from bench.run import record

    result = main()
    print(json.dumps(result))
    record("vit-extraction", result, ["-m", "bench.vit_extraction"])
