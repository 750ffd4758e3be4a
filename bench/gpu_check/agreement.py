"""CPU against CUDA, both in fp32: the largest difference of the frozen features of the
embedded default (EfficientNet-Lite0, Fashion-MNIST subset), and SimpleCIL's and
TOSCA's accuracies on it, each within a stated tolerance.

Why these tolerances: the kernels of the two devices sum in different orders, so
features differ in the last bits of fp32 (the bound is relative to the features'
scale); features are then cached in fp16 by both, so most such differences vanish,
but an image on a decision boundary can flip. SimpleCIL (class means) moves by at most
a few such images; TOSCA trains 20 epochs on them, so a flip can steer later steps.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from bench.gpu_check.sizes import Sizes
from cl_bench import api
from cl_bench.backbones import load_backbone
from cl_bench.engine.features import extract
from cl_bench.scenarios.loaders import fmnist

FEATURE_RELATIVE_BOUND = 1e-3  # largest |cpu - cuda| over the largest |feature|
ACCURACY_BOUND = {"simplecil": 0.5, "tosca": 1.5}  # accuracy points, average and last


def feature_gap(sizes: Sizes, device: torch.device) -> dict:
    data = fmnist()
    images = data.test_x[: sizes.agreement_images]
    found = {}
    for where in (torch.device("cpu"), device):
        backbone = load_backbone("efficientnet_lite0", None).to(where)
        found[where.type] = extract(backbone, images, where, precision="fp32", progress=False)
    gap = (found["cpu"] - found[device.type]).abs().max().item()
    scale = found["cpu"].abs().max().item()
    return {
        "images": len(images),
        "largest_abs_difference": gap,
        "relative_to_largest_feature": gap / scale,
        "bound": FEATURE_RELATIVE_BOUND,
        "within": gap / scale <= FEATURE_RELATIVE_BOUND,
    }


def accuracy_gap(device: torch.device, work: Path) -> dict:
    out = {}
    for where in ("cpu", str(device)):
        os.environ["CL_BENCH_CACHE"] = str(work / f"cache-{where}")
        for r in api.run(
            ["simplecil", "tosca"], device=where, precision="fp32", out=work / "agree", echo=None
        ):
            out.setdefault(r.method, {})[where.split(":")[0]] = {
                "avg_acc": r.avg_acc,
                "last_acc": r.last_acc,
            }
    for method, sides in out.items():
        gaps = [abs(sides["cpu"][m] - sides[device.type][m]) for m in ("avg_acc", "last_acc")]
        sides |= {
            "largest_gap": max(gaps),
            "bound": ACCURACY_BOUND[method],
            "within": max(gaps) <= ACCURACY_BOUND[method],
        }
    return out


def agreement(sizes: Sizes, device: torch.device, work: Path) -> dict:
    out = {"features": feature_gap(sizes, device)}
    if sizes.agreement_runs:
        out["runs"] = accuracy_gap(device, work)
    return out
