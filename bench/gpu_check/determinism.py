"""The same seed twice under ``--deterministic strict`` (must be bitwise equal) and under
``fast`` (the difference is reported), and what strict costs per step.

The workload is the one where GPU non-determinism lives: full fine-tuning of the ViT
(random weights) with AdamW under the precision ``auto`` picks, attention backward
included (atomics in the fused attention kernels, cuBLAS split-K). Each repeat starts
from the same weights and batches; what is compared is every trained weight at the end.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from bench.gpu_check.extraction import synchronize
from bench.gpu_check.sizes import Sizes
from cl_bench.backbones import load_backbone
from cl_bench.backbones.base import autocast
from cl_bench.engine.environment import make_deterministic, resolve_precision


def train(sizes: Sizes, device: torch.device, precision: str) -> tuple[list[torch.Tensor], float]:
    """The weights after ``determinism_steps`` AdamW steps, and seconds per step."""
    torch.manual_seed(0)
    model = load_backbone(sizes.backbone, "random", sizes.image_size).model
    model.requires_grad_(True).train().to(device)
    head = nn.Linear(model.num_features, 10).to(device)
    params = [*model.parameters(), *head.parameters()]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(sizes.determinism_batch, 3, sizes.image_size, sizes.image_size, generator=g).to(
        device
    )
    y = torch.randint(0, 10, (sizes.determinism_batch,), generator=g).to(device)
    times = []
    for _ in range(sizes.determinism_steps):
        synchronize(device)
        t0 = time.perf_counter()
        with autocast(device, precision):
            logits = head(model.forward_head(model.forward_features(x), pre_logits=True))
        loss = nn.functional.cross_entropy(logits.float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    steady = times[1:] or times
    return [p.detach().float().cpu() for p in params], sum(steady) / len(steady)


def largest_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


def determinism(sizes: Sizes, device: torch.device) -> dict:
    precision = resolve_precision("auto", device)
    out = {"precision": precision}
    for mode in ("strict", "fast"):
        out[mode] = {"set": make_deterministic(None, mode, device)}
        first, step_s = train(sizes, device, precision)
        second, _ = train(sizes, device, precision)
        gap = largest_difference(first, second)
        out[mode] |= {"bitwise_equal": gap == 0.0, "largest_difference": gap, "step_s": step_s}
    make_deterministic(None, "strict", device)
    out["strict_cost"] = out["strict"]["step_s"] / out["fast"]["step_s"]
    return out
