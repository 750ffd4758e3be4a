"""PromptedViT: timm's own output without prompts, prompt tokens where documented,
prefix attention equal to attention over concatenated keys/values."""

from __future__ import annotations

import pytest
import timm
import torch
from torch.testing import assert_close

from cl_bench.backbones.adapters import AdapterSet
from cl_bench.backbones.base import Backbone
from cl_bench.backbones.prompted import PromptedViT, prefix_attention

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread

# (name, image size): ViT-Ti (192 wide, 3 heads) and ViT-S (384 wide, 6 heads)
MODELS = {"tiny": ("vit_tiny_patch16_224", 32), "small": ("vit_small_patch16_224", 48)}


@pytest.fixture(scope="module", params=list(MODELS))
def vit(request) -> torch.nn.Module:
    name, size = MODELS[request.param]
    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, num_classes=0, img_size=size)


def images(model: torch.nn.Module, b: int = 3) -> torch.Tensor:
    size = model.patch_embed.img_size[0]
    return torch.rand(b, 3, size, size, generator=torch.Generator().manual_seed(1))


def test_no_prompts_is_timm_bitwise(vit):
    x = images(vit)
    expected = vit.forward_features(x)
    pv = PromptedViT(vit)
    for out in (pv(x), pv(x, prompts=None, prefixes=None), pv(x, prefixes={})):
        assert torch.equal(out.tokens, expected)
        assert torch.equal(out.cls, expected[:, 0])
        assert out.prompts.shape == (3, 0, vit.embed_dim)


def test_query_is_the_backbone_feature(vit):
    x = images(vit)
    backbone = Backbone(
        name="vit",
        model=vit,
        dim=vit.embed_dim,
        input_size=x.shape[-1],
        kind="vit",
        weights="random",
        weights_digest="random",
    )
    q = PromptedViT(vit).query(x)
    assert not q.requires_grad
    assert torch.equal(q, vit.forward_head(vit.forward_features(x), pre_logits=True))
    assert torch.equal(q, backbone.features(x))
    assert torch.equal(q, vit.forward_features(x)[:, 0])  # token pooling, no fc_norm


def test_wrapper_is_frozen_and_stays_in_eval(vit):
    pv = PromptedViT(vit)
    pv.train()
    assert not pv.training and not vit.training
    assert not any(p.requires_grad for p in vit.parameters())
    assert pv.vit is vit  # no copy


def test_prompt_tokens_sit_after_cls_and_change_the_output(vit):
    x, d = images(vit), vit.embed_dim
    prompts = torch.randn(3, 4, d, generator=torch.Generator().manual_seed(2))
    seen = []
    handle = vit.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    try:
        out = PromptedViT(vit)(x, prompts=prompts)
    finally:
        handle.remove()
    n_patches = vit.patch_embed.num_patches
    entering = seen[0]
    assert entering.shape == (3, 1 + 4 + n_patches, d)
    # [cls + pos_0, prompts (no position embedding), patches + pos_1..]
    assert torch.equal(entering[:, 0], (vit.cls_token[0] + vit.pos_embed[:, 0]).expand(3, -1))
    assert torch.equal(entering[:, 1:5], prompts)
    assert_close(entering[:, 5:], vit.patch_embed(x) + vit.pos_embed[:, 1:])
    assert out.tokens.shape == (3, 1 + 4 + n_patches, d)
    assert torch.equal(out.prompts, out.tokens[:, 1:5])
    plain = vit.forward_features(x)
    assert not torch.allclose(out.cls, plain[:, 0])
    # the hook is gone afterwards
    assert torch.equal(PromptedViT(vit)(x).tokens, plain)


def test_empty_prefixes_are_timm_bitwise(vit):
    x, d = images(vit), vit.embed_dim
    empty = torch.zeros(3, 0, d)
    out = PromptedViT(vit)(x, prefixes={0: (empty, empty), 1: (empty, empty)})
    assert torch.equal(out.tokens, vit.forward_features(x))


def test_prefix_changes_output_from_its_block_and_is_removed_after(vit):
    x, d = images(vit), vit.embed_dim
    g = torch.Generator().manual_seed(3)
    pk, pv_ = torch.randn(3, 2, d, generator=g), torch.randn(3, 2, d, generator=g)
    pvit = PromptedViT(vit)
    out = pvit(x, prefixes={1: (pk, pv_)})
    plain = vit.forward_features(x)
    assert out.tokens.shape == plain.shape
    assert not torch.allclose(out.tokens, plain)
    assert all("forward" not in blk.attn.__dict__ for blk in vit.blocks)
    assert torch.equal(pvit(x).tokens, plain)


def manual_prefix_attention(attn, x, pk, pv):
    """softmax(q [Pk; K]^T / sqrt(d_h)) [Pv; V] head by head, channels h*d_h .. (h+1)*d_h."""
    b, n, d = x.shape
    heads, hd = attn.num_heads, d // attn.num_heads
    q, k, v = (x @ attn.qkv.weight.T + attn.qkv.bias).split(d, dim=-1)
    k, v = torch.cat([pk, k], dim=1), torch.cat([pv, v], dim=1)
    out = []
    for h in range(heads):
        c = slice(h * hd, (h + 1) * hd)
        weights = torch.softmax(q[..., c] @ k[..., c].transpose(1, 2) / hd**0.5, dim=-1)
        out.append(weights @ v[..., c])
    return torch.cat(out, dim=-1) @ attn.proj.weight.T + attn.proj.bias


@pytest.mark.parametrize("fused", [True, False])
def test_prefix_attention_equals_concatenated_keys_values(vit, fused):
    attn, d = vit.blocks[2].attn, vit.embed_dim
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 7, d, generator=g)
    pk, pv = torch.randn(2, 3, d, generator=g), torch.randn(2, 3, d, generator=g)
    was = attn.fused_attn
    attn.fused_attn = fused
    try:
        with torch.no_grad():
            out = prefix_attention(attn, x, pk, pv)
    finally:
        attn.fused_attn = was
    assert_close(out, manual_prefix_attention(attn, x, pk, pv), rtol=1e-4, atol=1e-5)


def prompted_grads(vit, checkpoint_blocks: int):
    """Output and gradients of prompts and of a block-1 prefix for a fixed loss."""
    x, d = images(vit), vit.embed_dim
    g = torch.Generator().manual_seed(5)
    prompts = torch.randn(3, 4, d, generator=g).requires_grad_()
    pk = torch.randn(3, 2, d, generator=g).requires_grad_()
    pv = torch.randn(3, 2, d, generator=g).requires_grad_()
    calls = []  # a pre-hook: the recomputation stops once it has what backward needs
    handle = vit.blocks[0].register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        out = PromptedViT(vit, checkpoint_blocks=checkpoint_blocks)(
            x, prompts=prompts, prefixes={1: (pk, pv)}
        )
        (out.tokens.square().mean() + out.prompts.sum()).backward()
    finally:
        handle.remove()
    return out.tokens.detach(), prompts.grad, pk.grad, pv.grad, len(calls)


@pytest.mark.parametrize("blocks", [1, 5, 12])
def test_checkpointed_blocks_give_the_same_output_and_gradients(vit, blocks):
    plain = prompted_grads(vit, 0)
    ckpt = prompted_grads(vit, blocks)
    assert plain[-1] == 1 and ckpt[-1] == 2  # block 0 recomputed in the backward pass
    for a, b in zip(plain[:-1], ckpt[:-1], strict=True):
        assert torch.equal(a, b)
    assert all("forward" not in blk.attn.__dict__ for blk in vit.blocks)
    assert "forward" not in vit.blocks.__dict__


def test_checkpointing_is_off_without_gradients(vit):
    x = images(vit)
    calls = []
    handle = vit.blocks[0].register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        with torch.no_grad():
            out = PromptedViT(vit, checkpoint_blocks=12)(x)
    finally:
        handle.remove()
    assert calls == [1] and torch.equal(out.tokens, vit.forward_features(x))


def test_checkpoint_blocks_beyond_the_depth_is_refused(vit):
    with pytest.raises(ValueError, match="between 0 and the depth 12"):
        PromptedViT(vit, checkpoint_blocks=13)


def read_rows(
    vit, lean: bool, *, last_prefix: bool = False, adapter: bool = False, checkpoint_blocks: int = 0
):
    """[CLS] and prompt outputs of a pass with prompts and a block-1 prefix (and, when
    asked, a prefix and an adapter on the last block), their gradients for a loss on
    those rows, and the shape of ``tokens``."""
    x, d = images(vit), vit.embed_dim
    g = torch.Generator().manual_seed(6)
    prompts = torch.randn(3, 4, d, generator=g).requires_grad_()
    prefixes = {1: tuple(torch.randn(3, 2, d, generator=g).requires_grad_() for _ in "kv")}
    if last_prefix:
        prefixes[11] = tuple(torch.randn(3, 3, d, generator=g).requires_grad_() for _ in "kv")
    adapters = None
    if adapter:
        torch.manual_seed(7)
        adapters = AdapterSet(d, 8, [11]).eval()  # no dropout: both passes alike
        torch.nn.init.normal_(adapters[11].up.weight)  # a fresh adapter adds exactly 0
    leaves = [
        prompts,
        *(t for pair in prefixes.values() for t in pair),
        *(adapters.parameters() if adapters is not None else []),
    ]
    out = PromptedViT(vit, checkpoint_blocks=checkpoint_blocks)(
        x, prompts=prompts, prefixes=prefixes, adapters=adapters, lean_tail=lean
    )
    (out.cls.square().sum() + out.prompts.mean(1).square().sum()).backward()
    grads = [t.grad for t in leaves]
    return out.cls.detach(), out.prompts.detach(), grads, out.tokens.shape


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize(
    "case", [{}, {"last_prefix": True}, {"adapter": True}, {"checkpoint_blocks": 12}]
)
def test_lean_tail_gives_the_rows_read_and_their_gradients(vit, fused, case):
    """The last block on the [CLS] and prompt rows alone: the same outputs and gradients
    up to float32 round-off (the rows' matrix products sum in another order), for a
    last-block prefix, adapter and checkpointing too; ``tokens`` holds those 5 rows."""
    was = [blk.attn.fused_attn for blk in vit.blocks]
    for blk in vit.blocks:
        blk.attn.fused_attn = fused
    try:
        full, lean = read_rows(vit, False, **case), read_rows(vit, True, **case)
    finally:
        for blk, f in zip(vit.blocks, was, strict=True):
            blk.attn.fused_attn = f
    assert full[3] == (3, 1 + 4 + vit.patch_embed.num_patches, vit.embed_dim)
    assert lean[3] == (3, 5, vit.embed_dim)
    assert_close(lean[0], full[0], rtol=1e-5, atol=1e-5)
    assert_close(lean[1], full[1], rtol=1e-5, atol=1e-5)
    assert len(lean[2]) == len(full[2]) and all(g is not None for g in lean[2])
    for a, b in zip(lean[2], full[2], strict=True):
        assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert all(
        "forward" not in blk.__dict__ and "forward" not in blk.attn.__dict__ for blk in vit.blocks
    )


def test_lean_tail_computes_the_last_block_on_the_rows_read_only(vit):
    """The last block's MLP sees the 5 rows read (of 1 + 4 + patches); the block before
    it every row."""
    x, d = images(vit), vit.embed_dim
    prompts = torch.randn(3, 4, d, generator=torch.Generator().manual_seed(8))
    seen = {}
    handles = [
        vit.blocks[i].mlp.register_forward_hook(
            lambda m, args, out, i=i: seen.__setitem__(i, args[0].shape[1])
        )
        for i in (10, 11)
    ]
    try:
        with torch.no_grad():
            PromptedViT(vit)(x, prompts=prompts, lean_tail=True)
    finally:
        for h in handles:
            h.remove()
    assert seen == {10: 1 + 4 + vit.patch_embed.num_patches, 11: 5}
