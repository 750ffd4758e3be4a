"""Image tensors -> model input: float in [0, 1], 3 channels, square side.

Works on a batch (B, H, W) / (B, 3, H, W) for feature extraction, and on one
image (H, W) / (3, H, W) as an Avalanche per-sample transform. Greyscale is
repeated to 3 channels; resizing is bilinear with antialiasing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class ToModelInput:
    """uint8 image(s) -> float (…, 3, size, size) in [0, 1]."""

    def __init__(self, size: int) -> None:
        self.size = size

    @property
    def id(self) -> str:
        """Names the transform in result records and cache keys."""
        return f"to3ch-resize{self.size}-bilinear-aa"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        single = x.dim() in (2, 3) and not (x.dim() == 3 and x.shape[0] != 3)
        if x.dim() == 2 or (x.dim() == 3 and x.shape[0] != 3):
            x = x.unsqueeze(-3)  # (…, 1, H, W)
        if single:
            x = x.unsqueeze(0)
        x = x.float().div_(255.0)
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        if x.shape[-1] != self.size or x.shape[-2] != self.size:
            x = F.interpolate(x, size=(self.size, self.size), mode="bilinear",
                              align_corners=False, antialias=True)
        return x[0] if single else x
