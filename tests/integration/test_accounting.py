"""Accounting against analytic counts: FLOPs with attention, parameters
that count everything kept, backbone passes per test image."""

from __future__ import annotations

import pytest
import timm
import torch

from cl_bench.accounting.count import counting, stored_params
from cl_bench.contract import Bookkeeping
from cl_bench.engine.account import account
from cl_bench.strategies.blocks.luca import LuCA


def vit_flops(name: str, size: int = 224) -> int:
    model = timm.create_model(name, pretrained=False, num_classes=0).eval()
    with counting() as c, torch.no_grad():
        model(torch.zeros(1, 3, size, size))
    return c.get_total_flops()


def analytic_vit_flops(
    d: int,
    depth: int,
    heads: int,
    patch: int = 16,
    size: int = 224,
    mlp: int = 4,
    extra_tokens: int = 0,
    last_rows: int | None = None,
) -> int:
    """2 x MACs: patch embedding, qkv, QK^T, AV, proj, MLP (no norms/softmax).
    ``last_rows``: the last block's queries, projection and MLP on that many rows
    (qkv on every token)."""
    n = (size // patch) ** 2 + 1 + extra_tokens
    embed = (size // patch) ** 2 * 3 * patch * patch * d

    def block(rows: int) -> int:
        return n * d * 3 * d + 2 * rows * n * d + rows * d * d + 2 * rows * d * mlp * d

    assert heads * (d // heads) == d
    return 2 * (embed + (depth - 1) * block(n) + block(n if last_rows is None else last_rows))


def test_vit_base_is_35_13_gflops_with_attention():
    flops = vit_flops("vit_base_patch16_224")
    assert flops / 1e9 == pytest.approx(35.13, rel=0.005)
    assert flops == analytic_vit_flops(768, 12, 12)
    # per block, attention matmuls are 29.8 M MACs each (197^2 x 768)
    assert 197 * 197 * 768 == pytest.approx(29.8e6, rel=0.002)


def test_vit_tiny_matches_analytic_count():
    flops = vit_flops("vit_tiny_patch16_224")
    assert flops == analytic_vit_flops(192, 12, 3)
    # without the attention matmuls it is 2.15 GFLOPs
    attention = 2 * 12 * 2 * 197 * 197 * 192
    assert (flops - attention) / 1e9 == pytest.approx(2.15, rel=0.005)


def test_luca_flops_and_parameters():
    luca = LuCA(768)
    assert sum(p.numel() for p in luca.parameters()) == 149_808
    with counting() as c, torch.no_grad():
        luca(torch.zeros(1, 768))
    assert c.get_total_flops() == 2 * (2 * 768 * 48 + 2 * 768 * 48)


@pytest.fixture(scope="module")
def tosca_vs_simplecil():
    rows = account(["tosca", "simplecil"], "vit_base_patch16_224", None, 10, 200)
    return {r["method"]: r for r in rows}


def test_tosca_at_ten_tasks_is_one_backbone_pass_plus_ten_modules(tosca_vs_simplecil):
    tosca, simplecil = tosca_vs_simplecil["tosca"], tosca_vs_simplecil["simplecil"]
    bb = tosca["backbone_gflops_per_pass"] * 1e9
    modules = 10 * 2 * (2 * 768 * 48 + 2 * 768 * 48)
    cosine = 10 * 2 * 768 * 200  # every module's logits go through the shared classifier
    assert tosca["inference_gflops_per_image"] * 1e9 == pytest.approx(bb + modules + cosine)
    assert 1.0 < tosca["inference_backbone_passes"] < 1.01
    assert simplecil["inference_gflops_per_image"] * 1e9 == pytest.approx(bb + 2 * 768 * 200)


def test_parameters_added_and_stored(tosca_vs_simplecil):
    tosca, simplecil = tosca_vs_simplecil["tosca"], tosca_vs_simplecil["simplecil"]
    # one LuCA + 20 new cosine rows per task; sigma once
    assert tosca["added_per_task"] == [149_808 + 20 * 768 + 1] + [149_808 + 20 * 768] * 9
    assert tosca["stored_at_end"] == sum(tosca["added_per_task"]) == 10 * 149_808 + 200 * 768 + 1
    # the optimizer covers the newest LuCA, every classifier row and sigma
    assert tosca["trainable_last_task"] == 149_808 + 200 * 768 + 1
    assert simplecil["trainable_last_task"] == 0
    assert simplecil["stored_at_end"] == 200 * 768 + 1
    assert tosca["backbone_params"] == 85_798_656


def test_stored_counts_plugin_state_but_not_the_backbone():
    from types import SimpleNamespace

    from avalanche.core import SupervisedPlugin

    class Holder(SupervisedPlugin):
        def __init__(self):
            super().__init__()
            self.importances = {"w": torch.zeros(10, 3)}

    class Bookkeeper(Bookkeeping, SupervisedPlugin):
        def __init__(self):
            super().__init__()
            self.log = [torch.zeros(100)]

    bb_model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0)
    model = torch.nn.Sequential(bb_model, torch.nn.Linear(192, 5))
    strategy = SimpleNamespace(model=model, plugins=[Holder(), Bookkeeper()])
    backbone = SimpleNamespace(model=bb_model)
    assert stored_params(strategy, backbone) == 192 * 5 + 5 + 30


@pytest.fixture(scope="module")
def prompt_methods():
    rows = account(["l2p", "dualprompt", "coda-prompt"], "vit_tiny_patch16_224", None, 5, 50)
    return {r["method"]: r for r in rows}


def test_l2p_is_query_pass_plus_prompted_pass_with_25_more_tokens(prompt_methods):
    """The prompted pass's last block runs on the [CLS] and the 25 prompt rows only."""
    l2p = prompt_methods["l2p"]
    query = analytic_vit_flops(192, 12, 3)
    prompted = analytic_vit_flops(192, 12, 3, extra_tokens=25, last_rows=26)
    assert prompted < analytic_vit_flops(192, 12, 3, extra_tokens=25) * 0.95
    assert l2p["inference_gflops_per_image"] * 1e9 == pytest.approx(query + prompted, rel=1e-3)
    assert l2p["inference_gflops_per_image"] * 1e9 > query + prompted  # + key match + head


def test_prefix_methods_cost_two_passes(prompt_methods):
    for name in ("dualprompt", "coda-prompt"):
        assert prompt_methods[name]["inference_backbone_passes"] == pytest.approx(2.0, abs=0.01)


def test_prompt_parameters_allocated_once_and_stored(prompt_methods):
    head = 192 * 50 + 50
    assert prompt_methods["l2p"]["trainable_last_task"] == 11_520 + head
    assert prompt_methods["dualprompt"]["trainable_last_task"] == 63_360 + head
    assert prompt_methods["coda-prompt"]["trainable_last_task"] == 960_000 + head
    for r in prompt_methods.values():
        assert r["added_per_task"][1:] == [0] * 4
        assert r["stored_at_end"] == sum(r["added_per_task"]) == r["trainable_last_task"]


def test_l2p_on_200_classes_of_vit_base_has_199_880_trainable():
    from cl_bench.backbones import load_backbone
    from cl_bench.cards.catalogue import load_method
    from cl_bench.strategies.l2p import L2P

    backbone = load_backbone("vit_base_patch16_224", "random", 32)
    strategy = L2P(
        params=load_method("l2p").params,
        backbone=backbone,
        n_classes=200,
        device=torch.device("cpu"),
        plugins=[],
        evaluator=None,
    )
    assert sum(p.numel() for p in strategy.model.parameters() if p.requires_grad) == 199_880


def test_account_runs_every_loop_a_card_sets_in_epochs_once():
    from cl_bench.engine.account import one_pass

    params = {
        "epochs": 20,
        "init_epochs": 10,
        "fit_epochs": 3,
        "ca_epochs": 30,
        "epochs_scale": 2.0,
        "lr": 0.1,
        "batch_size": 128,
    }
    assert one_pass(params) == {"epochs": 1, "init_epochs": 1, "fit_epochs": 1, "ca_epochs": 1}
