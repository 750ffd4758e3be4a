"""fp16 training (GPUs without bf16) of a prompt method on a ViT: L2P trains under
float16 autocast through its tasks' GradScalers, on the CPU (the loss scaling itself, on
the smallest strategy: tests/unit/test_loss_scale.py)."""

from __future__ import annotations

import pytest
import torch

from cl_bench.contract import drive
from cl_bench.engine.environment import seed_everything
from tests.helpers.strategies import strategy, vit_backbone
from tests.helpers.streams import small_stream

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread


def weights(s) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in s.model.state_dict().items()}


def test_a_prompt_method_trains_under_fp16_on_the_vit():
    """L2P on a random ViT-Tiny at 32 px, every pass under fp16 autocast: each task's
    steps go through its scaler and the prompts and head move and stay finite."""
    tiny = vit_backbone("vit_tiny_patch16_224", 192)
    tiny.precision = "fp16"
    seed_everything(1993)
    s = strategy("l2p", tiny, 4, epochs=1, batch_size=8)
    before = weights(s)
    drive(s, small_stream())
    assert isinstance(s.scaler, torch.amp.GradScaler) and s.scaler.get_scale() > 0
    after = weights(s)
    for name in ("prompts", "keys.keys", "head.weight"):
        assert not torch.equal(before[name], after[name]), name
        assert torch.isfinite(after[name]).all(), name
