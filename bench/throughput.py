"""(e) Frozen ViT-B/16 feature extraction on this CPU, fp32 vs bf16 autocast,
against the 35.13 GFLOPs per image; and the accuracy change bf16 makes on the
embedded fmnist (TOSCA, SimpleCIL on EfficientNet-Lite0)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from bench.common import timed
from cl_bench.backbones import load_backbone
from cl_bench.backbones.base import autocast

BF16_PEAK_GFLOPS = 2300.0  # REFERENCE.md section 6, 2 cores
VIT_B_GFLOPS = 35.13


def images_per_second(precision: str, batch: int = 16, batches: int = 3) -> float:
    backbone = load_backbone("vit_base_patch16_224", "random")
    x = torch.rand(batch, 3, 224, 224)

    def run():
        with autocast("cpu", precision):
            for _ in range(batches):
                backbone.features(x)
    run()
    return batch * batches / timed(run, repeat=2)


def fmnist_accuracy(precision: str) -> dict:
    from cl_bench.runner import RunRequest, execute
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CL_BENCH_CACHE"] = str(Path(tmp) / "cache")
        req = RunRequest(methods=["tosca", "simplecil"], precision=precision,
                         out=Path(tmp) / "out", progress=False)
        return {r["method"]: r["last_acc"] for r in execute(req, echo=lambda _: None)}


def main() -> dict:
    out = {}
    for precision in ("fp32", "bf16"):
        ips = images_per_second(precision)
        out[precision] = {"images_per_s": ips,
                          "share_of_bf16_peak": ips * VIT_B_GFLOPS / BF16_PEAK_GFLOPS}
    acc32, acc16 = fmnist_accuracy("fp32"), fmnist_accuracy("bf16")
    out["fmnist_last_acc"] = {m: {"fp32": acc32[m], "bf16": acc16[m],
                                  "delta": acc16[m] - acc32[m]} for m in acc32}
    return out


if __name__ == "__main__":
    print(main())
