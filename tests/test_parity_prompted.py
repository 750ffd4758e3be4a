"""The parity rows of L2P and DualPrompt (bench/parity/prompted.py): the comparison of
two step records, and the init trace that leaves cl-bench's run unchanged. Neither
needs the reference checkout."""

from __future__ import annotations

import inspect

import torch

from bench.parity import prompted
from bench.parity.drivers import ours_init
from cl_bench.strategies.blocks.shared_vit import OnSharedViT


def record(shift: float = 0.0) -> dict:
    params = {"prompts": torch.ones(2, 3), "head.weight": torch.zeros(4, 3)}
    params["head.weight"][1, 2] += shift
    return {key: {"params": {k: v.clone() for k, v in params.items()},
                  "losses": [0.5, 0.25 + shift], "logits": torch.eye(3) + shift}
            for key in ("step 1", "task 1", "task 2")}


def test_gaps_of_equal_records_are_zero():
    g = prompted.gaps(record(), record())
    assert g["after"] == ["step 1", "task 1", "task 2"]
    assert g["max_abs_param"] == g["max_abs_loss"] == g["max_abs_logit"] == [0.0] * 3
    assert g["argmax_agree"] == [1.0] * 3


def test_gaps_name_the_tensor_that_differs():
    g = prompted.gaps(record(), record(0.125))
    assert g["max_abs_param"] == [0.125] * 3
    assert g["worst_tensor"] == ["head.weight"] * 3
    assert g["max_abs_loss"] == g["max_abs_logit"] == [0.125] * 3


def test_init_trace_keeps_the_constructor_signature():
    """Avalanche refuses keyword arguments its strategies' constructors do not name."""
    assert inspect.signature(ours_init._traced) == inspect.signature(OnSharedViT.__init__)
