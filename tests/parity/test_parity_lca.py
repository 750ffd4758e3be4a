"""The LCA parity row's own pieces that need neither the authors' code nor a backbone:
the tensor names between the two sides, what is copied into the authors' code per
task, and the authors' config from the card."""

from __future__ import annotations

import pytest
import torch

from bench.parity.methods.lca import row
from bench.parity.methods.lca.reference import AttrDict, ours_name, ref_name
from cl_bench.cards.catalogue import load_method

PAIRS = {
    "adapter.0.down.weight": "backbone.blocks.0.adaptmlp.down_proj.weight",
    "adapter.11.up.bias": "backbone.blocks.11.adaptmlp.up_proj.bias",
    "head.2": "classifier.heads.2.0.weight",
}


@pytest.mark.parametrize("ours,theirs", PAIRS.items())
def test_trainable_names_map_both_ways(ours, theirs):
    assert ours_name(theirs) == ours
    assert ref_name(ours) == theirs


def test_frozen_backbone_tensors_are_not_compared():
    assert ours_name("backbone.cls_token") is None
    assert ours_name("backbone.blocks.3.q_proj.weight") is None


def test_initial_tensors_per_task():
    now = {"adapter.0.up.bias": torch.zeros(1), "head.0": torch.ones(1), "head.1": torch.ones(1)}
    assert sorted(row.initial(0, now)) == ["adapter.0.up.bias", "head.0"]
    assert sorted(row.initial(1, now)) == ["head.1"]  # the adapters go on from the merge


def test_official_config_follows_the_card():
    card = load_method("lca")
    card.params.update(row.STEP)
    config = row.official_config(card.params, 3, 2)
    assert (config["train_epochs"], config["train_base_lr"], config["train_batch_size"]) == (
        2,
        0.1,
        48,
    )
    assert (config["train_merge"], config["train_merge_topk"], config["train_merge_coef"]) == (
        "ties",
        100,
        1.0,
    )
    assert config["train_merge_incremental"] and config["train_ca"]
    assert (config["train_ca_samples_per_cls"], config["train_ca_batch_size"]) == (512, 128)
    assert (config["train_ca_epochs"], config["train_ca_lr"]) == (10, 0.005)
    assert config["train_ca_robust_weight"] == 0.1 and config["train_ca_entropy_weight"] == 0
    assert config["train_weight_decay"] == 0.0005 and config["ffn_num"] == 16
    assert config["reset_train"] and config["reset_merge"]  # never its checkpoint files


def test_attribute_dict_reads_keys():
    assert AttrDict(d_model=192).d_model == 192
