"""Low-rank updates (LoRA, Hu et al., ICLR 2022) of the linear layers of a frozen timm ViT.

A linear layer y = W x + b becomes

    y = (W + s B A) x + b = W x + b + s B (A x)

with A: r x d_in and B: d_out x r trained, s a fixed scale. As SLDC's authors build it
(raoxuan98-hash/sldc_rebuttal at fe0f492, ``convs/vits.py``: ``LoraAttention``,
``LoraMlp`` and their ``init_lora``), every block's attention ``qkv`` and both MLP
layers ``fc1`` and ``fc2`` carry one, rank 4, s = 0.8, B zero and A the top ``r`` right
singular vectors of the pretrained W (the rows of V^T of W = U S V^T), so a fresh set
adds exactly 0. Parameters per block: r (d + 3 d) for qkv, r (d + h) for each MLP layer
(h the MLP width); at d = 768, h = 3072, r = 4: 43,008, over 12 blocks 516,096.

Injection uses timm's public module hooks only, scoped to one call (:func:`lora_applied`):
a forward hook on each chosen ``nn.Linear`` adds s B (A x) to what it returns (the same
function as the authors' merged weight, up to float rounding). The ViT is never copied,
so any number of :class:`LoraSet` objects (the current one, the previous task's copy) may
take turns on it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn

LORA_RANK = 4  # lora_rank of the authors' main_sldc.py
LORA_SCALE = 0.8  # lora_scale of LoraAttention and LoraMlp
TARGETS = ("attn.qkv", "mlp.fc1", "mlp.fc2")  # the linear layers of a block that carry one


class LowRank(nn.Module):
    """s B (A x) for one linear layer of weight ``weight`` (d_out x d_in)."""

    def __init__(self, weight: torch.Tensor, rank: int, scale: float) -> None:
        super().__init__()
        d_out, d_in = weight.shape
        if not 0 < rank <= min(d_out, d_in):
            raise ValueError(f"LoRA rank must lie in 1..{min(d_out, d_in)}, got {rank}")
        right = torch.linalg.svd(weight.detach().float(), full_matrices=False).Vh[:rank]
        self.A = nn.Parameter(right.clone())
        self.B = nn.Parameter(torch.zeros(d_out, rank, device=weight.device))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x, self.A.to(x.dtype)), self.B.to(x.dtype)) * self.scale


def target_layer(vit: VisionTransformer, block: int, name: str) -> nn.Linear:
    """Block ``block``'s linear layer ``name`` (one of :data:`TARGETS`)."""
    module: nn.Module = vit.blocks[block]
    for part in name.split("."):
        module = getattr(module, part)
    if not isinstance(module, nn.Linear):
        raise TypeError(f"LoRA needs nn.Linear at blocks.{block}.{name}, found {type(module)}")
    return module


class LoraSet(nn.Module):
    """One :class:`LowRank` per target layer of every chosen block, initialised from
    ``vit``'s weights (the ViT itself is not kept)."""

    def __init__(
        self,
        vit: VisionTransformer,
        blocks: Sequence[int],
        rank: int = LORA_RANK,
        scale: float = LORA_SCALE,
        targets: Sequence[str] = TARGETS,
    ) -> None:
        super().__init__()
        self.rank, self.scale, self.targets = rank, scale, tuple(targets)
        self.updates = nn.ModuleDict(
            {
                key(b, name): LowRank(target_layer(vit, b, name).weight, rank, scale)
                for b in sorted(blocks)
                for name in self.targets
            }
        )

    def layers(self, vit: VisionTransformer) -> Iterator[tuple[nn.Linear, LowRank]]:
        """(the ViT's linear layer, its update) for every update of the set."""
        for k, update in self.updates.items():
            block, name = k.split("_", 1)
            yield target_layer(vit, int(block), name.replace("_", ".")), update


def key(block: int, name: str) -> str:
    """The ModuleDict key of block ``block``'s layer ``name`` (no dots allowed there)."""
    return f"{block}_{name.replace('.', '_')}"


@contextmanager
def lora_applied(vit: VisionTransformer, lora: LoraSet | None) -> Iterator[None]:
    """Within the context, every layer that ``lora`` names returns W x + b + s B (A x);
    ``None`` touches nothing."""
    with ExitStack() as stack:
        if lora is not None:
            for layer, update in lora.layers(vit):

                def add(
                    _module: nn.Module, args: tuple, output: torch.Tensor, update=update
                ) -> torch.Tensor:
                    return output + update(args[0])

                stack.callback(layer.register_forward_hook(add).remove)
        yield
