"""The SLDC parity row's own pieces that need neither the authors' code nor a backbone:
the tensor names between the two sides, what is copied into the authors' code per
task, the authors' config from the card, and the patch's refusal of a missing anchor."""

from __future__ import annotations

import pytest
import torch

from bench.parity.methods.sldc import patch, row
from bench.parity.methods.sldc.reference import ours_name
from cl_bench.cards.catalogue import load_method

PAIRS = {
    "convnet.blocks.0.attn.lora_A": "lora.0_attn_qkv.A",
    "convnet.blocks.11.attn.lora_B": "lora.11_attn_qkv.B",
    "convnet.blocks.3.mlp.lora_1_A": "lora.3_mlp_fc1.A",
    "convnet.blocks.3.mlp.lora_2_B": "lora.3_mlp_fc2.B",
}


@pytest.mark.parametrize("theirs,ours", PAIRS.items())
def test_lora_names_map_to_cl_bench(theirs, ours):
    assert ours_name(theirs) == ours


def test_frozen_backbone_tensors_are_not_compared():
    assert ours_name("convnet.blocks.0.attn.qkv.weight") is None
    assert ours_name("convnet.norm.weight") is None
    assert ours_name("fc.heads.0.weight") is None  # the heads are read by position


def test_initial_tensors_per_task():
    now = {"lora.0_attn_qkv.A": torch.zeros(1), "head.0": torch.ones(1), "head.1": torch.ones(1)}
    assert sorted(row.initial(0, now)) == ["head.0", "lora.0_attn_qkv.A"]
    assert sorted(row.initial(1, now)) == ["head.1"]  # the LoRA set goes on from task 0


def test_official_config_follows_the_card():
    card = load_method("sldc")
    card.params.update(row.STEP)
    config = row.official_config(card.params, 3, 2)
    assert (config["epochs"], config["lrate"], config["batch_size"]) == (2, 0.001, 16)
    assert (config["head_scale"], config["weight_decay"], config["optimizer"]) == (
        10.0,
        3e-05,
        "adamw",
    )
    assert (config["gamma_kd"], config["gamma_norm"], config["kd_type"]) == (1.0, 0.1, "feat")
    assert (config["gamma_1"], config["alpha_t"], config["lora_rank"]) == (0.0001, 1.0, 4)
    assert config["use_linear_compensation"] and config["only_lora"]
    assert not config["use_weak_nonlinear_compensation"] and not config["use_mlp_compensation"]
    assert not config["use_auxiliary_data_enhancement"]


def test_patch_refuses_a_copy_without_its_anchor(tmp_path):
    for rel, _, _ in patch.EDITS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("nothing to anchor on\n")
    with pytest.raises(SystemExit, match="found 0 times"):
        patch.patch(tmp_path)


def test_patch_applies_once_and_is_idempotent(tmp_path):
    for rel, anchor, _ in patch.EDITS:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((path.read_text() if path.exists() else "") + anchor + "\n")
    patch.patch(tmp_path)
    patch.patch(tmp_path)
    for rel, _, new in patch.EDITS:
        assert (tmp_path / rel).read_text().count(new) == 1
