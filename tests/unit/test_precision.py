"""bf16 storage of a frozen backbone's matrix-multiply weights: the same outputs as
bf16 autocast over fp32 weights, used only when no method trains the backbone."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cl_bench.accounting.count import backbone_flops
from cl_bench.backbones import load_backbone
from cl_bench.engine.runner import RunRequest, load_shared, resolve_cards

CPU = torch.device("cpu")


@pytest.mark.parametrize("name,size", [("vit_tiny_patch16_224", 32), ("efficientnet_lite0", 32)])
def test_bf16_weights_give_autocast_outputs_bit_for_bit(name, size):
    backbone = load_backbone(name, "random", size)
    backbone.precision = "bf16"
    x = torch.rand(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    flops = backbone_flops(backbone)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        before = backbone.features(x)
        backbone.store_matmul_weights_in_bf16()
        after = backbone.features(x)
    assert torch.equal(before, after)
    modules = list(backbone.model.modules())
    assert {m.weight.dtype for m in modules if isinstance(m, (nn.Linear, nn.Conv2d))} == {
        torch.bfloat16
    }
    norms = [m for m in modules if isinstance(m, (nn.LayerNorm, nn.BatchNorm2d))]
    assert norms and {m.weight.dtype for m in norms} == {torch.float32}
    assert backbone_flops(backbone) == flops  # accounting runs under the same autocast


def test_bf16_weights_need_bf16_precision():
    backbone = load_backbone("vit_tiny_patch16_224", "random", 32)
    with pytest.raises(ValueError, match="needs precision bf16"):
        backbone.store_matmul_weights_in_bf16()


@pytest.mark.parametrize(
    "methods,precision,expected",
    [
        (["tosca", "simplecil"], "bf16", torch.bfloat16),
        (["tosca", "finetune"], "bf16", torch.float32),  # fine-tuning starts from fp32
        (["tosca"], "fp32", torch.float32),
    ],
)
def test_runner_stores_bf16_weights_only_for_frozen_bf16_runs(methods, precision, expected):
    req = RunRequest(methods=methods, scenario="synthetic", weights="random", progress=False)
    cards, scenario = resolve_cards(req)
    shared = load_shared(req, scenario, cards, CPU, precision)
    conv = next(m for m in shared.backbone.model.modules() if isinstance(m, nn.Conv2d))
    assert conv.weight.dtype == expected
