"""LoRA on a frozen timm ViT: the hooked layer equals the merged weight W + s B A, a fresh
set changes nothing, A starts as the top right singular vectors, the hooks leave with
the context, and the parameter count at ViT-B width."""

from __future__ import annotations

import timm
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from cl_bench.backbones.lora import LoraSet, LowRank, lora_applied


def tiny_vit(dim: int = 16, depth: int = 2):
    torch.manual_seed(0)
    return timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        num_classes=0,
        img_size=32,
        embed_dim=dim,
        depth=depth,
        num_heads=2,
    ).eval()


def test_low_rank_update_by_hand():
    weight = torch.diag(torch.tensor([3.0, 2.0, 1.0]))  # singular vectors e1, e2, e3
    update = LowRank(weight, rank=2, scale=0.5)
    assert_close(update.A.abs(), torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    assert torch.equal(update.B, torch.zeros(3, 2))
    with torch.no_grad():
        update.A.copy_(torch.tensor([[1.0, 0.0, 1.0], [0.0, 2.0, 0.0]]))
        update.B.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    x = torch.tensor([[1.0, 2.0, 3.0]])
    # A x = (4, 4); B (A x) = (4, 4, 8); times 0.5
    assert_close(update(x), torch.tensor([[2.0, 2.0, 4.0]]))


def test_hooked_layers_equal_the_merged_weights():
    vit = tiny_vit()
    lora = LoraSet(vit, range(2), rank=2, scale=0.8)
    x = torch.rand(2, 3, 32, 32)
    plain = vit.forward_features(x)
    with lora_applied(vit, lora):
        assert torch.equal(vit.forward_features(x), plain)  # B = 0: nothing changes
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in lora.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    with lora_applied(vit, lora):
        hooked = vit.forward_features(x)
    assert not torch.allclose(hooked, plain)
    assert all(not m._forward_hooks for m in vit.modules())  # hooks left with the context
    merged = tiny_vit()
    with torch.no_grad():
        for b in range(2):
            for name, layer in (
                ("attn_qkv", merged.blocks[b].attn.qkv),
                ("mlp_fc1", merged.blocks[b].mlp.fc1),
                ("mlp_fc2", merged.blocks[b].mlp.fc2),
            ):
                u = lora.updates[f"{b}_{name}"]
                layer.weight += 0.8 * u.B @ u.A
    assert_close(hooked, merged.forward_features(x), rtol=1e-5, atol=1e-5)


def test_a_starts_as_the_top_right_singular_vectors():
    vit = tiny_vit()
    lora = LoraSet(vit, [1], rank=3)
    weight = vit.blocks[1].mlp.fc1.weight
    vh = torch.linalg.svd(weight, full_matrices=False).Vh
    assert_close(lora.updates["1_mlp_fc1"].A, vh[:3])
    assert list(lora.updates) == ["1_attn_qkv", "1_mlp_fc1", "1_mlp_fc2"]
    # the projection of W onto its top-3 right singular directions keeps their energy
    s = torch.linalg.svdvals(weight)
    assert_close(F.linear(weight, lora.updates["1_mlp_fc1"].A).norm(), s[:3].norm())


def test_parameters_at_vit_b_width():
    torch.manual_seed(0)
    vit = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=0)
    lora = LoraSet(vit, range(12))
    per_block = 4 * (768 + 3 * 768) + 4 * (768 + 3072) + 4 * (3072 + 768)
    assert per_block == 43_008
    assert sum(p.numel() for p in lora.parameters()) == 12 * per_block == 516_096
