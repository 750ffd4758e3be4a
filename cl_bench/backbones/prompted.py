"""Prompt and prefix injection into a frozen timm ``VisionTransformer``.

One timm model serves both passes a prompt method makes per image:

* ``query(x)``: the frozen final [CLS] without prompts (timm's
  ``forward_features`` then ``forward_head(pre_logits=True)``), no grad, eval mode;
* ``forward(x, prompts, prefixes)``: the same ``forward_features`` with
  - prompt tuning (L2P): ``prompts`` (B, P, D) become extra tokens, inserted
    right before the first block, after the position embedding was added:
    layout ``[cls (+ registers), prompts, patches]``, prompt j at position
    ``num_prefix_tokens + j``;
  - prefix tuning (DualPrompt, CODA-Prompt): ``prefixes[i] = (key_prefix,
    value_prefix)``, each (B, L, D), are prepended to the keys and values of
    block i's attention (split into heads as timm splits k and v), so
    softmax(q [Pk; K]^T / sqrt(d_h)) [Pv; V]; the sequence length is unchanged;
  - adapters (EASE, MOS, APER): ``adapters``, an
    :class:`~cl_bench.backbones.adapters.AdapterSet`, parallel bottlenecks on the
    MLP of the blocks it names (see that module).

Why the prompts get no position embedding: L2P's official code (and its ports in
PILOT and Mammoth) prepends them to the patch embeddings and then adds a
position table enlarged by copies of the [CLS] entry, so each prompt token is
p + pos_cls. With p a free parameter and pos_cls frozen that is the same
family of models, shifted at initialisation only; inserting after the position
embedding leaves timm's embedding code and tables untouched.

Both injections are scoped to one call and use timm's public modules only: a
forward pre-hook on ``blocks`` adds the prompt tokens, and the chosen blocks'
attention ``forward`` is shadowed for the call by :func:`prefix_attention`. When
neither is given nothing is touched, so the output is timm's, bit for bit. No
copy of the ViT is made: methods share the runner's frozen backbone.

Activation checkpointing (``checkpoint_blocks=k``, used when gradients are on):
the prompt gradients flow back through every block, so a training pass keeps
every block's activations; with k > 0 the first k blocks run under
``torch.utils.checkpoint`` (non-reentrant) and are recomputed in the backward
pass instead. Outputs and gradients are the same numbers; each checkpointed
block trades its activations for one more forward pass through it. The prefix
of a block is shadowed inside the checkpointed call, so the recomputation sees
it too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from timm.layers import Attention
from timm.models.vision_transformer import VisionTransformer
from torch import nn
from torch.utils.checkpoint import checkpoint

from cl_bench.backbones.adapters import Adapter, AdapterSet, adapted, adapted_block, check_blocks

Prefix = tuple[torch.Tensor, torch.Tensor]


class PromptedOutput(NamedTuple):
    """Final-normed tokens (B, N, D), their [CLS] (B, D) and the outputs at the
    prompt positions (B, P, D; P = 0 without prompts)."""

    tokens: torch.Tensor
    cls: torch.Tensor
    prompts: torch.Tensor


def split_heads(t: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, D) -> (B, heads, L, D / heads): channel c = h * head_dim + j, the
    split timm applies to its k and v."""
    b, n, d = t.shape
    return t.reshape(b, n, num_heads, d // num_heads).transpose(1, 2)


def prefix_attention(attn: Attention, x: torch.Tensor, key_prefix: torch.Tensor,
                     value_prefix: torch.Tensor, attn_mask: torch.Tensor | None = None,
                     is_causal: bool = False) -> torch.Tensor:
    """timm ``Attention.forward`` with learned keys/values prepended per sample.

    Follows timm's own steps (qkv, q/k norm, fused or explicit attention, output
    norm, gate, projection); the prefixes are free parameters and enter as given
    (no k-norm).
    """
    if attn_mask is not None or is_causal:
        raise NotImplementedError("prefix tuning with an attention mask is not supported")
    if key_prefix.shape[1] != value_prefix.shape[1]:
        raise ValueError(f"key and value prefixes must have the same length, got "
                         f"{key_prefix.shape[1]} and {value_prefix.shape[1]}")
    b, n, _ = x.shape
    heads, head_dim = attn.num_heads, attn.head_dim
    gate = getattr(attn, "gate", None)
    gate = gate(x).sigmoid() if gate is not None else None
    q, k, v = attn.qkv(x).reshape(b, n, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    q, k = attn.q_norm(q), attn.k_norm(k)
    k = torch.cat([split_heads(key_prefix.to(k.dtype), heads), k], dim=2)
    v = torch.cat([split_heads(value_prefix.to(v.dtype), heads), v], dim=2)
    if attn.fused_attn:
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=attn.attn_drop.p if attn.training else 0.0)
    else:
        out = attn.attn_drop((q * attn.scale @ k.transpose(-2, -1)).softmax(dim=-1)) @ v
    out = out.transpose(1, 2).reshape(b, n, heads * head_dim)
    out = getattr(attn, "norm", nn.Identity())(out)
    if gate is not None:
        out = out * gate
    return attn.proj_drop(attn.proj(out))


class PromptedViT(nn.Module):
    """A frozen timm ``VisionTransformer`` with prompt and prefix injection.

    The wrapped model is the caller's instance (no copy); it is frozen and kept
    in eval mode whatever ``train()`` is called with, so dropout and drop-path
    never act on the frozen backbone.
    """

    def __init__(self, model: VisionTransformer, checkpoint_blocks: int = 0) -> None:
        super().__init__()
        if not isinstance(model, VisionTransformer):
            raise TypeError(f"PromptedViT wraps a timm VisionTransformer, got "
                            f"{type(model).__name__}")
        if model.cls_token is None:
            raise ValueError("prompt methods read the [CLS] token; this ViT has none")
        self.vit = model.eval().requires_grad_(False)
        self.dim: int = model.embed_dim
        self.depth: int = len(model.blocks)
        self.num_prefix_tokens: int = model.num_prefix_tokens
        if not 0 <= checkpoint_blocks <= self.depth:
            raise ValueError(f"checkpoint_blocks must be between 0 and the depth "
                             f"{self.depth}, got {checkpoint_blocks}")
        self.checkpoint_blocks = checkpoint_blocks

    def train(self, mode: bool = True) -> PromptedViT:
        """Frozen: stays in eval mode."""
        return super().train(False)

    @torch.no_grad()
    def query(self, x: torch.Tensor) -> torch.Tensor:
        """Frozen final [CLS] (pre-logits) of normalised images, shape (B, D)."""
        return self.vit.forward_head(self.vit.forward_features(x), pre_logits=True)

    def forward(self, x: torch.Tensor, prompts: torch.Tensor | None = None,
                prefixes: Mapping[int, Prefix] | None = None,
                adapters: AdapterSet | None = None) -> PromptedOutput:
        """Prompted pass over normalised images; see the module docstring.

        A prefix of length 0, like ``None``, leaves that block as timm has it.
        ``adapters``: parallel MLP adapters active for this pass
        (:mod:`cl_bench.backbones.adapters`).
        """
        n_prompts = 0 if prompts is None else prompts.shape[1]
        active = {index: prefix for index, prefix in (prefixes or {}).items()
                  if prefix[0].shape[1] or prefix[1].shape[1]}
        with ExitStack() as stack:
            if n_prompts:
                stack.enter_context(self._inserted(prompts))
            if self.checkpoint_blocks and torch.is_grad_enabled():
                if adapters is not None:
                    check_blocks(self.vit.blocks, adapters)
                stack.enter_context(self._checkpointed(active, adapters))
            else:
                stack.enter_context(adapted(self.vit.blocks, adapters))
                for index, (key_prefix, value_prefix) in active.items():
                    stack.enter_context(self._prefixed(index, key_prefix, value_prefix))
            tokens = self.vit.forward_features(x)
        start = self.num_prefix_tokens
        return PromptedOutput(tokens, tokens[:, 0], tokens[:, start:start + n_prompts])

    def _block(self, index: int, x: torch.Tensor, prefix: Prefix | None,
               adapter: Adapter | None = None) -> torch.Tensor:
        """Block ``index`` on ``x``, with its prefix and adapter when it has them."""
        with ExitStack() as stack:
            if prefix is not None:
                stack.enter_context(self._prefixed(index, *prefix))
            if adapter is not None:
                stack.enter_context(adapted_block(self.vit.blocks[index], adapter))
            return self.vit.blocks[index](x)

    @contextmanager
    def _checkpointed(self, prefixes: Mapping[int, Prefix],
                      adapters: AdapterSet | None = None) -> Iterator[None]:
        """Shadow ``blocks.forward`` for the call: the first ``checkpoint_blocks``
        blocks checkpointed, the others as usual."""
        blocks = self.vit.blocks
        chosen = set(adapters.blocks) if adapters is not None else set()

        def run(x: torch.Tensor) -> torch.Tensor:
            for index in range(len(blocks)):
                adapter = adapters[index] if index in chosen else None
                if index < self.checkpoint_blocks:
                    x = checkpoint(self._block, index, x, prefixes.get(index), adapter,
                                   use_reentrant=False)
                else:
                    x = self._block(index, x, prefixes.get(index), adapter)
            return x

        blocks.forward = run
        try:
            yield
        finally:
            del blocks.forward

    @contextmanager
    def _inserted(self, prompts: torch.Tensor) -> Iterator[None]:
        """Insert ``prompts`` into the token sequence entering the first block."""
        start = self.num_prefix_tokens

        def hook(_module: nn.Module, args: tuple) -> tuple:
            x = args[0]
            return (torch.cat([x[:, :start], prompts.to(x.dtype), x[:, start:]], dim=1),
                    *args[1:])

        handle = self.vit.blocks.register_forward_pre_hook(hook)
        try:
            yield
        finally:
            handle.remove()

    @contextmanager
    def _prefixed(self, index: int, key_prefix: torch.Tensor,
                  value_prefix: torch.Tensor) -> Iterator[None]:
        """Shadow block ``index``'s attention forward by :func:`prefix_attention`."""
        attn = self.vit.blocks[index].attn
        if not isinstance(attn, Attention):
            raise TypeError(f"prefix tuning needs timm's Attention in block {index}, found "
                            f"{type(attn).__name__}")
        attn.forward = partial(prefix_attention, attn, key_prefix=key_prefix,
                               value_prefix=value_prefix)
        try:
            yield
        finally:
            del attn.forward
