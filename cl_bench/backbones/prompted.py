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

The last block for the rows read only (``lean_tail=True``): a method that reads only
the [CLS] and prompt outputs (``PromptedOutput.cls`` and ``.prompts``) can ask the last
block to compute attention queries, projection and MLP for those rows alone, the
first ``num_prefix_tokens + P`` of the sequence; keys and values still come from
every token. Attention, layer norms and the MLP act on each row separately, so the
rows read are the same function of the input; only the matrix products' summation
order may differ with their row count (float32 round-off, tested). It saves the last
block's work on the patch tokens: for L2P at ViT-B/16 (197 + 25 tokens, 26 rows read)
a prompted pass is 37.5 instead of 39.8 GFLOPs, and that block keeps less for the
backward pass. ``tokens`` then holds only those rows.

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
from timm.models.vision_transformer import Block, VisionTransformer
from torch import nn
from torch.utils.checkpoint import checkpoint

from cl_bench.backbones.adapters import Adapter, AdapterSet, adapted, adapted_block, check_blocks

Prefix = tuple[torch.Tensor, torch.Tensor]


class PromptedOutput(NamedTuple):
    """Final-normed tokens (B, N, D; with ``lean_tail`` only the [CLS], register and
    prompt rows), their [CLS] (B, D) and the outputs at the prompt positions (B, P, D;
    P = 0 without prompts)."""

    tokens: torch.Tensor
    cls: torch.Tensor
    prompts: torch.Tensor


def split_heads(t: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, D) -> (B, heads, L, D / heads): channel c = h * head_dim + j, the
    split timm applies to its k and v."""
    b, n, d = t.shape
    return t.reshape(b, n, num_heads, d // num_heads).transpose(1, 2)


def prefix_attention(
    attn: Attention,
    x: torch.Tensor,
    key_prefix: torch.Tensor | None,
    value_prefix: torch.Tensor | None,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    rows: int | None = None,
) -> torch.Tensor:
    """timm ``Attention.forward`` with learned keys/values prepended per sample.

    Follows timm's own steps (qkv, q/k norm, fused or explicit attention, output
    norm, gate, projection); the prefixes are free parameters and enter as given
    (no k-norm); ``None`` or length 0: no prefix. ``rows``: queries (and the output)
    for the first ``rows`` tokens only, keys and values from all (``lean_tail``).
    """
    if attn_mask is not None or is_causal:
        raise NotImplementedError("prefix tuning with an attention mask is not supported")
    lengths = [0 if p is None else p.shape[1] for p in (key_prefix, value_prefix)]
    if lengths[0] != lengths[1]:
        raise ValueError(
            f"key and value prefixes must have the same length, got {lengths[0]} and {lengths[1]}"
        )
    b, n, _ = x.shape
    rows = n if rows is None else rows
    heads, head_dim = attn.num_heads, attn.head_dim
    gate = getattr(attn, "gate", None)
    gate = gate(x[:, :rows]).sigmoid() if gate is not None else None
    q, k, v = attn.qkv(x).reshape(b, n, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    q, k = attn.q_norm(q[:, :, :rows]), attn.k_norm(k)
    if lengths[0]:
        k = torch.cat([split_heads(key_prefix.to(k.dtype), heads), k], dim=2)
        v = torch.cat([split_heads(value_prefix.to(v.dtype), heads), v], dim=2)
    if attn.fused_attn:
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=attn.attn_drop.p if attn.training else 0.0
        )
    else:
        out = attn.attn_drop((q * attn.scale @ k.transpose(-2, -1)).softmax(dim=-1)) @ v
    out = out.transpose(1, 2).reshape(b, rows, heads * head_dim)
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
            raise TypeError(
                f"PromptedViT wraps a timm VisionTransformer, got {type(model).__name__}"
            )
        if model.cls_token is None:
            raise ValueError("prompt methods read the [CLS] token; this ViT has none")
        self.vit = model.eval().requires_grad_(False)
        self.dim: int = model.embed_dim
        self.depth: int = len(model.blocks)
        self.num_prefix_tokens: int = model.num_prefix_tokens
        if not 0 <= checkpoint_blocks <= self.depth:
            raise ValueError(
                f"checkpoint_blocks must be between 0 and the depth "
                f"{self.depth}, got {checkpoint_blocks}"
            )
        self.checkpoint_blocks = checkpoint_blocks

    def train(self, mode: bool = True) -> PromptedViT:
        """Frozen: stays in eval mode."""
        return super().train(False)

    @torch.no_grad()
    def query(self, x: torch.Tensor) -> torch.Tensor:
        """Frozen final [CLS] (pre-logits) of normalised images, shape (B, D)."""
        return self.vit.forward_head(self.vit.forward_features(x), pre_logits=True)

    def forward(
        self,
        x: torch.Tensor,
        prompts: torch.Tensor | None = None,
        prefixes: Mapping[int, Prefix] | None = None,
        adapters: AdapterSet | None = None,
        lean_tail: bool = False,
    ) -> PromptedOutput:
        """Prompted pass over normalised images; see the module docstring.

        A prefix of length 0, like ``None``, leaves that block as timm has it.
        ``adapters``: parallel MLP adapters active for this pass
        (:mod:`cl_bench.backbones.adapters`). ``lean_tail``: the last block computes
        only the [CLS], register and prompt rows (module docstring).
        """
        n_prompts = 0 if prompts is None else prompts.shape[1]
        start = self.num_prefix_tokens
        active = {
            index: prefix
            for index, prefix in (prefixes or {}).items()
            if prefix[0].shape[1] or prefix[1].shape[1]
        }
        rows = start + n_prompts if lean_tail else None
        with ExitStack() as stack:
            if n_prompts:
                stack.enter_context(self._inserted(prompts))
            if self.checkpoint_blocks and torch.is_grad_enabled():
                if adapters is not None:
                    check_blocks(self.vit.blocks, adapters)
                stack.enter_context(self._checkpointed(active, adapters, rows))
            else:
                stack.enter_context(adapted(self.vit.blocks, adapters))
                changed = set(active) | ({self.depth - 1} if lean_tail else set())
                for index in sorted(changed):
                    stack.enter_context(self._injected(index, active.get(index), None, rows))
            tokens = self.vit.forward_features(x)
        return PromptedOutput(tokens, tokens[:, 0], tokens[:, start : start + n_prompts])

    def _block(
        self,
        index: int,
        x: torch.Tensor,
        prefix: Prefix | None,
        adapter: Adapter | None = None,
        rows: int | None = None,
    ) -> torch.Tensor:
        """Block ``index`` on ``x``, with its prefix, adapter and lean tail when it has them."""
        with self._injected(index, prefix, adapter, rows):
            return self.vit.blocks[index](x)

    @contextmanager
    def _injected(
        self, index: int, prefix: Prefix | None, adapter: Adapter | None, rows: int | None
    ) -> Iterator[None]:
        """Block ``index``'s prefix and adapter (when given), and for the last block with
        ``rows`` the lean tail, for the context."""
        with ExitStack() as stack:
            tail = rows is not None and index == self.depth - 1
            if prefix is not None or tail:
                stack.enter_context(
                    self._prefixed(index, *(prefix or (None, None)), rows=rows if tail else None)
                )
            if tail:
                stack.enter_context(self._lean(index, rows))
            if adapter is not None:
                stack.enter_context(adapted_block(self.vit.blocks[index], adapter))
            yield

    @contextmanager
    def _lean(self, index: int, rows: int) -> Iterator[None]:
        """Shadow block ``index``'s forward: timm's two residual branches on the first
        ``rows`` tokens, its attention (shadowed by :meth:`_prefixed`) giving those rows."""
        block = self.vit.blocks[index]
        if not isinstance(block, Block):
            raise TypeError(
                f"lean_tail needs timm's Block as the last block, found {type(block).__name__}"
            )

        def forward(x: torch.Tensor) -> torch.Tensor:
            x = x[:, :rows] + block.drop_path1(block.ls1(block.attn(block.norm1(x))))
            return x + block.drop_path2(block.ls2(block.mlp(block.norm2(x))))

        block.forward = forward
        try:
            yield
        finally:
            del block.forward

    @contextmanager
    def _checkpointed(
        self,
        prefixes: Mapping[int, Prefix],
        adapters: AdapterSet | None = None,
        rows: int | None = None,
    ) -> Iterator[None]:
        """Shadow ``blocks.forward`` for the call: the first ``checkpoint_blocks``
        blocks checkpointed, the others as usual."""
        blocks = self.vit.blocks
        chosen = set(adapters.blocks) if adapters is not None else set()

        def run(x: torch.Tensor) -> torch.Tensor:
            for index in range(len(blocks)):
                adapter = adapters[index] if index in chosen else None
                if index < self.checkpoint_blocks:
                    x = checkpoint(
                        self._block,
                        index,
                        x,
                        prefixes.get(index),
                        adapter,
                        rows,
                        use_reentrant=False,
                    )
                else:
                    x = self._block(index, x, prefixes.get(index), adapter, rows)
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
            return (torch.cat([x[:, :start], prompts.to(x.dtype), x[:, start:]], dim=1), *args[1:])

        handle = self.vit.blocks.register_forward_pre_hook(hook)
        try:
            yield
        finally:
            handle.remove()

    @contextmanager
    def _prefixed(
        self,
        index: int,
        key_prefix: torch.Tensor | None,
        value_prefix: torch.Tensor | None,
        rows: int | None = None,
    ) -> Iterator[None]:
        """Shadow block ``index``'s attention forward by :func:`prefix_attention`."""
        attn = self.vit.blocks[index].attn
        if not isinstance(attn, Attention):
            raise TypeError(
                f"prefix tuning and lean_tail need timm's Attention in block "
                f"{index}, found {type(attn).__name__}"
            )
        attn.forward = partial(
            prefix_attention, attn, key_prefix=key_prefix, value_prefix=value_prefix, rows=rows
        )
        try:
            yield
        finally:
            del attn.forward
