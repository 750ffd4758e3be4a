"""Parallel MLP adapters: timm's output without them (and with fresh ones), the
official block formula with trained ones, scoped hooks, merging, checkpointing and
the parameter counts EASE and MOS report."""

from __future__ import annotations

import pytest
import timm
import torch
from torch.testing import assert_close

from cl_bench.backbones.adapters import Adapter, AdapterSet, adapted, merge
from cl_bench.backbones.prompted import PromptedViT

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread


@pytest.fixture(scope="module")
def vit() -> torch.nn.Module:
    torch.manual_seed(0)
    return (
        timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, img_size=32)
        .eval()
        .requires_grad_(False)
    )


def images(b: int = 3) -> torch.Tensor:
    return torch.rand(b, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def trained(dim: int, ffn: int, blocks, seed: int) -> AdapterSet:
    """A set with every parameter random (a fresh one adds zero)."""
    g = torch.Generator().manual_seed(seed)
    s = AdapterSet(dim, ffn, blocks).eval()
    with torch.no_grad():
        for p in s.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return s


def no_hooks_left(vit) -> bool:
    return all(not b._forward_hooks and not b.norm2._forward_pre_hooks for b in vit.blocks)


def test_parameter_counts_at_vit_b_width():
    # EASE's added parameters per task: d = 768, ffn 64, 12 blocks
    assert sum(p.numel() for p in AdapterSet(768, 64, range(12)).parameters()) == 1_189_632
    # MOS: ffn 16
    assert sum(p.numel() for p in AdapterSet(768, 16, range(12)).parameters()) == 304_320
    assert sum(p.numel() for p in Adapter(768, 64).parameters()) == 99_136


def test_init_is_the_official_lora_init():
    torch.manual_seed(3)
    a = Adapter(192, 8)
    assert torch.equal(a.up.weight, torch.zeros(192, 8))
    assert torch.equal(a.up.bias, torch.zeros(192))
    assert torch.equal(a.down.bias, torch.zeros(8))
    bound = 1 / 192**0.5  # kaiming_uniform_(a=sqrt(5)) on fan_in 192
    assert 0 < float(a.down.weight.detach().abs().max()) <= bound
    assert (a.scale, a.dropout) == (0.1, 0.1)


def test_no_adapters_and_fresh_adapters_are_timm_bitwise(vit):
    x = images()
    expected = vit.forward_features(x)
    pv = PromptedViT(vit)
    for adapters in (None, AdapterSet(192, 8, []), AdapterSet(192, 8, range(12))):
        out = pv(x, adapters=adapters)
        assert torch.equal(out.tokens, expected)
    assert no_hooks_left(vit)


def test_one_block_equals_the_hand_written_formula(vit):
    block = vit.blocks[1]
    a = trained(192, 8, [1], seed=4)[1]
    x = torch.randn(2, 5, 192, generator=torch.Generator().manual_seed(5))
    # official Block.forward with adapt(x, add_residual=False), parallel option
    h = x + block.attn(block.norm1(x))
    down = torch.relu(h @ a.down.weight.T + a.down.bias)
    expected = h + block.mlp(block.norm2(h)) + 0.1 * (down @ a.up.weight.T + a.up.bias)
    s = trained(192, 8, [1], seed=4)
    with adapted(vit.blocks, s):
        got = block(x)
    assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, block(x))  # the adapter changed it; hooks gone
    assert no_hooks_left(vit)


def test_whole_vit_with_adapters_on_chosen_blocks(vit):
    x = images()
    s = trained(192, 8, [0, 5, 11], seed=6)
    t = vit.norm_pre(vit._pos_embed(vit.patch_embed(x)))
    for i, block in enumerate(vit.blocks):
        h = t + block.attn(block.norm1(t))
        t = h + block.mlp(block.norm2(h))
        if i in s.blocks:
            t = t + s[i](h)
    got = PromptedViT(vit)(x, adapters=s)
    assert_close(got.tokens, vit.norm(t), rtol=1e-5, atol=1e-5)
    assert no_hooks_left(vit)


def test_sets_switch_per_forward_without_touching_the_vit_or_the_query(vit):
    x = images()
    before = {k: v.clone() for k, v in vit.state_dict().items()}
    pv = PromptedViT(vit)
    a, b = trained(192, 8, range(12), seed=7), trained(192, 8, range(12), seed=8)
    out_a, out_b = pv(x, adapters=a).cls, pv(x, adapters=b).cls
    assert not torch.allclose(out_a, out_b)
    assert torch.equal(pv(x, adapters=a).cls, out_a)
    assert torch.equal(pv.query(x), vit.forward_head(vit.forward_features(x), pre_logits=True))
    assert all(torch.equal(v, before[k]) for k, v in vit.state_dict().items())
    assert pv.vit is vit


def test_merge_is_the_weighted_parameter_sum(vit):
    a, b = trained(192, 8, [2, 3], seed=9), trained(192, 8, [2, 3], seed=10)
    m = merge([a, b], [0.25, 0.75])
    assert m.blocks == (2, 3)
    for name, p in m.named_parameters():
        expected = 0.25 * dict(a.named_parameters())[name] + 0.75 * dict(b.named_parameters())[name]
        assert torch.equal(p, expected)
    with pytest.raises(ValueError, match="same blocks"):
        merge([a, trained(192, 8, [2], seed=1)], [0.5, 0.5])
    with pytest.raises(ValueError, match="one weight per set"):
        merge([a, b], [1.0])


def test_bad_blocks_are_refused(vit):
    with pytest.raises(ValueError, match="distinct"):
        AdapterSet(192, 8, [1, 1])
    with pytest.raises(ValueError, match="block 12, but the ViT has 12 blocks"):
        PromptedViT(vit)(images(), adapters=AdapterSet(192, 8, [12]))
    assert no_hooks_left(vit)


def test_dropout_acts_in_training_only(vit):
    x = images()
    s = trained(192, 8, range(12), seed=11)
    pv = PromptedViT(vit)
    ev = pv(x, adapters=s).cls
    s.train()
    torch.manual_seed(0)
    tr = pv(x, adapters=s).cls
    assert not torch.allclose(tr, ev)
    s.eval()
    assert torch.equal(pv(x, adapters=s).cls, ev)


def test_gradients_reach_the_adapters_only_and_checkpointing_keeps_them(vit):
    x = images(2)
    s = trained(192, 8, [0, 6, 11], seed=12)
    s.requires_grad_(True)
    grads, outs = [], []
    for k in (0, 12):
        s.zero_grad()
        out = PromptedViT(vit, checkpoint_blocks=k)(x, adapters=s).cls
        out.square().sum().backward()
        outs.append(out.detach())
        grads.append([p.grad.clone() for p in s.parameters()])
    assert torch.equal(outs[0], outs[1])
    for g0, g1 in zip(*grads, strict=True):
        assert_close(g0, g1)
        assert g0.abs().sum() > 0
    assert all(p.grad is None for p in vit.parameters())
    assert no_hooks_left(vit)
