"""The ``accounting`` block of a run's record, and of a ``cl-bench account`` row, from
what was counted: per-task parameters and the FLOPs at the end of the stream."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn


def accounting_fields(
    backbone: nn.Module,
    trainable: Sequence[int],
    stored: Sequence[int],
    pass_flops: int,
    inference: int,
    train_per_sample: Sequence[float],
) -> dict:
    """``trainable`` and ``stored``: per task; ``pass_flops``: one frozen backbone pass;
    ``inference``: FLOPs per test image after the last task; ``train_per_sample``: the
    FLOPs per sample of each training step counted (the largest is recorded)."""
    return {
        "backbone_params": sum(p.numel() for p in backbone.parameters()),
        "backbone_frozen": sum(p.numel() for p in backbone.parameters() if not p.requires_grad),
        "trainable_per_task": list(trainable),
        "added_per_task": [b - a for a, b in zip([0, *stored[:-1]], stored, strict=True)],
        "stored_per_task": list(stored),
        "stored_at_end": stored[-1],
        "backbone_gflops_per_pass": pass_flops / 1e9,
        "inference_gflops_per_image": inference / 1e9,
        "train_gflops_per_sample": max(train_per_sample) / 1e9 if train_per_sample else 0.0,
    }
