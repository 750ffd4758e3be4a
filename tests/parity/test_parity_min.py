"""The MiN parity row's own pieces that need neither the authors' code nor a backbone:
the tensor names between the two sides and the authors' config from a card."""

from __future__ import annotations

import pytest

from bench.parity.methods.min import row
from bench.parity.methods.min.reference import ours_name, ref_name
from cl_bench.cards.catalogue import load_method

PAIRS = {
    "head.weight": "normal_fc.weight",
    "head.bias": "normal_fc.bias",
    "layers.3.mlp.weight": "backbone.noise_maker.3.MLP.weight",
    "layers.11.mlp.bias": "backbone.noise_maker.11.MLP.bias",
    "sets.1.4.mu.weight": "backbone.noise_maker.4.mu.1.weight",
    "sets.0.0.sigma.bias": "backbone.noise_maker.0.sigmma.0.bias",
    "norms.0.weight": "backbone.blocks.0.norm1.weight",
    "norms.7.bias": "backbone.blocks.3.norm2.bias",
    "norms.24.weight": "backbone.norm.weight",
}


@pytest.mark.parametrize("ours,theirs", PAIRS.items())
def test_trainable_names_map_both_ways(ours, theirs):
    assert ref_name(ours) == theirs
    assert ours_name(theirs) == ours


def test_fixed_tensors_map_to_the_official_attributes():
    assert ref_name("layers.2.down") == "backbone.noise_maker.2.w_down"
    assert ref_name("layers.2.up") == "backbone.noise_maker.2.w_up"
    assert ref_name("projection") == "buffer.weight"


def test_official_args_follow_the_card():
    card = load_method("min")
    card.params.update(row.STEP)
    args = row.official_args(card.params)
    assert (args["init_lr"], args["lr"], args["init_batch_size"], args["buffer_size"]) == (
        0.01,
        0.01,
        16,
        512,
    )
    assert (args["gamma"], args["buffer_batch"], args["fit_epochs"], args["hidden_dim"]) == (
        500.0,
        1000,
        3,
        192,
    )
    assert args["init_weight_decay"] == args["weight_decay"] == 0.0005
    assert args["optimizer_type"] == "sgd" and args["scheduler_type"] == "step"
