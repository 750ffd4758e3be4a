"""Loss scaling for the methods that train under fp16 autocast (``precision: fp16``,
the GPUs without bf16 units: T4, V100).

fp16 keeps 5 exponent bits: a gradient below about 6e-8 flushes to zero, so the
backward of an unscaled loss loses much of its signal. ``torch.amp.GradScaler``
multiplies the loss by a scale before the backward, divides the gradients by it
before the step, skips a step whose gradients overflowed (halving the scale) and
doubles the scale after 2000 steps without an overflow. bf16 has fp32's exponent
range and fp32 needs nothing: there no scaler exists and Avalanche's own backward and
step run, so their numbers are the same bit for bit as without this mixin.

A scaler is built with every per-task optimizer (``make_optimizer``; the per-task
template rebuilds the optimizer at each task), so nothing of it outlives a task. A run
resumed from a per-task checkpoint therefore starts its next task with the same fresh
scaler (initial scale 2^16) that an uninterrupted run starts it with, and the scaler
is not checkpointed. Its step reads one flag back from the GPU (whether a gradient
overflowed), as ``GradScaler.step`` does for every optimizer without a fused kernel:
the one host sync per step that fp16 training costs.
"""

from __future__ import annotations

import torch


def loss_scaler(device: torch.device | str, precision: str) -> torch.amp.GradScaler | None:
    """A fresh GradScaler on ``device`` for fp16; None for bf16 and fp32."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(torch.device(device).type)


class LossScaling:
    """Strategy mixin, before the Avalanche template in the bases: in fp16 the loss is
    scaled for the backward and the step goes through the scaler (module docstring).
    Reads ``self.precision``."""

    precision = "fp32"
    scaler: torch.amp.GradScaler | None = None

    def make_optimizer(self, **kwargs) -> None:
        super().make_optimizer(**kwargs)
        self.scaler = loss_scaler(self.device, self.precision)

    def backward(self) -> None:
        if self.scaler is None:
            super().backward()
            return
        self.scaler.scale(self.loss).backward(retain_graph=self.retain_graph)

    def optimizer_step(self) -> None:
        if self.scaler is None:
            super().optimizer_step()
            return
        self.scaler.step(self.optimizer)
        self.scaler.update()
