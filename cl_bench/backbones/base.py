"""A frozen backbone as the strategies see it: a final feature and its width."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

RANDOM_INIT_SEED = 0
TORCH_RUNTIME = "torch"  # frozen passes in torch eager (Backbone.runtime)


AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device | str, precision: str):
    """bf16 or fp16 autocast when ``precision`` is "bf16" or "fp16" (GPUs without bf16
    units; what trains under it scales its loss: ``strategies/blocks/loss_scale.py``);
    a no-op context for "fp32"."""
    device_type = torch.device(device).type
    if precision in AUTOCAST_DTYPES:
        return torch.autocast(device_type, dtype=AUTOCAST_DTYPES[precision])
    return contextlib.nullcontext()


@functools.lru_cache(maxsize=32)
def channel_stats(
    values: tuple[float, ...], device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """``values`` as a (1, C, 1, 1) tensor on ``device``, built once: a tensor made
    from Python numbers on a GPU is a host-to-device copy, which waits for the GPU, and
    :meth:`Backbone.normalize` runs at every batch. Made outside inference mode, so that
    a training pass may save it for its backward; nothing writes to it."""
    with torch.inference_mode(False):
        return torch.tensor(values, device=device, dtype=dtype).view(1, len(values), 1, 1)


@contextlib.contextmanager
def seeded_init(seed: int = RANDOM_INIT_SEED) -> Iterator[None]:
    """Build models under a fixed seed without touching the caller's RNG, so that
    ``--weights random`` is the same network in every invocation (and its runs
    are comparable and skippable under one config hash)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


class PreLogits(nn.Module):
    """The final feature of ``model`` as its forward (what ``functional_call`` runs, and
    what a compiled runtime traces)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.m = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.m.forward_head(self.m.forward_features(x), pre_logits=True)


@dataclass
class Backbone:
    """A frozen timm model plus what is needed to feed it and to record it.

    ``features`` gives the frozen final feature: the final-norm [CLS] token for a
    ViT, the globally pooled vector for a CNN (timm's ``forward_head(...,
    pre_logits=True)`` gives both). Inputs are images in [0, 1] at
    ``input_size``; normalisation, when the weights need it, happens here so
    that data transforms are shared across backbones.
    """

    name: str
    model: nn.Module
    dim: int
    input_size: int
    kind: str  # "cnn" or "vit"
    weights: str  # pretrained tag, local path, or "random"
    weights_digest: str
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    precision: str = "fp32"  # of the passes that use this backbone (set by the runner)
    # what runs a run's frozen feature passes (set by the runner): "torch", or a
    # compiled CPU runtime (:func:`cl_bench.backbones.compiled.frozen_features`, which
    # keeps its compilation in ``_compiled``); :meth:`features` stays the reference pass
    runtime: str = TORCH_RUNTIME
    _compiled: object = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.model.eval().requires_grad_(False)
        if self.kind == "cnn":
            # depthwise convolutions are several times faster in channels_last on CPU
            self.model.to(memory_format=torch.channels_last)

    @property
    def normalization(self) -> str:
        """Recorded in results and cache keys."""
        return "none" if self.mean is None else f"mean={self.mean},std={self.std}"

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        if self.mean is None:
            return x
        mean = channel_stats(tuple(self.mean), x.device, x.dtype)
        std = channel_stats(tuple(self.std), x.device, x.dtype)
        return (x - mean).div_(std)  # the same values as (x - mean) / std, one array less

    @torch.inference_mode()
    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Frozen final feature, shape (B, dim), float32."""
        x = self.normalize(x)
        if self.kind == "cnn":
            x = x.contiguous(memory_format=torch.channels_last)
        out = self.model.forward_head(self.model.forward_features(x), pre_logits=True)
        return out.float()

    def store_matmul_weights_in_bf16(self) -> None:
        """Keep the weights and biases of the frozen model's linear and convolution
        layers in bf16, for runs whose passes all use bf16 autocast.

        Autocast casts exactly these tensors to bf16 at every call, so the outputs
        are bit for bit the same (tested); this halves their memory (ViT-B/16: 344
        -> 172 MB) and saves the casts. Norms, embeddings and tokens stay fp32.
        Irreversible: only for runs in which no method trains a copy of the
        backbone (those start from the fp32 weights)."""
        if self.precision != "bf16":
            raise ValueError(
                "bf16 weight storage needs precision bf16 (the passes must run under bf16 autocast)"
            )
        for module in self.model.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                module.to(torch.bfloat16)

    def to(self, device: torch.device | str) -> Backbone:
        self.model.to(device)
        return self
