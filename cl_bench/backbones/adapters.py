"""Parallel bottleneck adapters (AdaptFormer) on the MLP of a frozen timm ViT.

AdaptFormer (Chen et al., NeurIPS 2022), as EASE and MOS configure it
(LAMDA-PILOT ``backbone/vit_ease.py``, ``vit_mos.py``; ``ffn_option: parallel``,
``ffn_adapter_layernorm_option: none``, ``ffn_adapter_scalar: 0.1``,
``ffn_adapter_init_option: lora``): block i of the ViT becomes

    h   = x + attn(norm1(x))                        timm's first residual branch
    out = h + mlp(norm2(h)) + s * up(drop(relu(down(h))))

with down: D -> r, up: r -> D (both with bias), s = 0.1 a fixed scale, dropout
0.1 on the bottleneck in training, and the "lora" init: down's weight
Kaiming-uniform (a = sqrt 5, nn.Linear's own), down's bias, up's weight and
bias zero, so a fresh adapter adds exactly 0. The adapter reads h, the block's
input to ``norm2`` (not the normed one), and its output joins the block's
output, exactly the official ``Block.forward`` with ``adapt(x, add_residual=False)``.
Parameters per block: 2 D r + r + D; at D = 768, r = 64 over 12 blocks:
12 x 99,136 = 1,189,632.

Injection uses timm's public module hooks only, scoped to one call
(:func:`adapted`): a forward pre-hook on block i's ``norm2`` records h, and a
forward hook on block i adds the adapter's output to what the block returns.
With no adapters nothing is touched, so the output is timm's, bit for bit. The
ViT is never copied: any number of :class:`AdapterSet` objects (one per task
for EASE and MOS) live outside it and one is chosen per forward; a weighted
parameter merge of several sets (:func:`merge`) is again an ``AdapterSet``.
The hooks fire inside ``Block.__call__``, so they compose with
:class:`~cl_bench.backbones.prompted.PromptedViT`'s prompts and prefixes; under
its activation checkpointing each block's adapter is hooked inside the
checkpointed call (:func:`adapted_block`), so the recomputation in the backward
pass sees it too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import Block
from torch import nn

ADAPTER_SCALE = 0.1  # ffn_adapter_scalar of the EASE and MOS configs
ADAPTER_DROPOUT = 0.1  # Adapter(dropout=0.1) in get_new_adapter / init_adapters


class Adapter(nn.Module):
    """One block's bottleneck: ``scale * up(dropout(relu(down(h))))``."""

    def __init__(
        self, dim: int, ffn: int, scale: float = ADAPTER_SCALE, dropout: float = ADAPTER_DROPOUT
    ) -> None:
        super().__init__()
        self.down = nn.Linear(dim, ffn)  # weight: kaiming_uniform_(a=sqrt(5)), the lora init
        self.up = nn.Linear(ffn, dim)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)
        self.scale = scale
        self.dropout = dropout

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        z = F.dropout(F.relu(self.down(h)), p=self.dropout, training=self.training)
        return self.up(z) * self.scale


class AdapterSet(nn.Module):
    """One :class:`Adapter` per chosen block index, all of width ``ffn``."""

    def __init__(
        self,
        dim: int,
        ffn: int,
        blocks: Sequence[int],
        scale: float = ADAPTER_SCALE,
        dropout: float = ADAPTER_DROPOUT,
    ) -> None:
        super().__init__()
        if len(set(blocks)) != len(blocks) or any(b < 0 for b in blocks):
            raise ValueError(f"adapter blocks must be distinct indices >= 0, got {list(blocks)}")
        self.dim, self.ffn, self.scale, self.dropout = dim, ffn, scale, dropout
        self.adapters = nn.ModuleDict(
            {str(b): Adapter(dim, ffn, scale, dropout) for b in sorted(blocks)}
        )

    @property
    def blocks(self) -> tuple[int, ...]:
        return tuple(int(b) for b in self.adapters)

    def __getitem__(self, block: int) -> Adapter:
        return self.adapters[str(block)]

    def same_shape(self, other: AdapterSet) -> bool:
        return (self.blocks, self.dim, self.ffn) == (other.blocks, other.dim, other.ffn)


@torch.no_grad()
def merge(sets: Sequence[AdapterSet], weights: Sequence[float]) -> AdapterSet:
    """A new set whose every parameter is ``sum_k weights[k] * sets[k]``'s (no grad;
    scale and dropout of the first set). All sets must have the same blocks and width."""
    if not sets or len(sets) != len(weights):
        raise ValueError(
            f"merge needs one weight per set, got {len(sets)} sets and {len(weights)} weights"
        )
    first = sets[0]
    if not all(first.same_shape(s) for s in sets):
        raise ValueError("merged adapter sets must have the same blocks, dim and ffn")
    out = AdapterSet(first.dim, first.ffn, first.blocks, first.scale, first.dropout)
    out.to(next(first.parameters()).device)
    sources = [dict(s.named_parameters()) for s in sets]
    for name, param in out.named_parameters():
        param.copy_(sum(w * src[name] for w, src in zip(weights, sources, strict=True)))
    return out


def check_blocks(blocks: nn.Sequential, adapters: AdapterSet) -> None:
    """Refuse a set that names a block the ViT lacks or that is not timm's ``Block``."""
    for index in adapters.blocks:
        if index >= len(blocks):
            raise ValueError(f"adapter on block {index}, but the ViT has {len(blocks)} blocks")
        if not isinstance(blocks[index], Block):
            raise TypeError(
                f"adapters need timm's Block in block {index}, found {type(blocks[index]).__name__}"
            )


@contextmanager
def adapted_block(block: Block, adapter: Adapter) -> Iterator[None]:
    """Within the context, timm ``block`` runs with its parallel ``adapter``."""
    inner: list[torch.Tensor] = []  # h, the input of the block's norm2, until the block ends

    def record(_module: nn.Module, args: tuple) -> None:
        inner.append(args[0])

    def add(_module: nn.Module, _args: tuple, output: torch.Tensor) -> torch.Tensor:
        return output + adapter(inner.pop())

    handles = [block.norm2.register_forward_pre_hook(record), block.register_forward_hook(add)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def adapted(blocks: nn.Sequential, adapters: AdapterSet | None) -> Iterator[None]:
    """Within the context, every block of ``blocks`` (a timm ViT's ``blocks``) that
    ``adapters`` names runs with its parallel adapter; ``None`` touches nothing."""
    with ExitStack() as stack:
        if adapters is not None:
            check_blocks(blocks, adapters)
            for index in adapters.blocks:
                stack.enter_context(adapted_block(blocks[index], adapters[index]))
        yield
