"""The parity rows of L2P and DualPrompt (bench/parity/prompted.py): the comparison of
two step records, and the init trace that leaves cl-bench's run unchanged. Neither
needs the reference checkout."""

from __future__ import annotations

import inspect

import pytest
import torch
from PIL import Image

from bench.parity import prompted
from bench.parity.drivers import ours_init
from cl_bench.strategies.blocks.shared_vit import OnSharedViT


def record(shift: float = 0.0) -> dict:
    params = {"prompts": torch.ones(2, 3), "head.weight": torch.zeros(4, 3)}
    params["head.weight"][1, 2] += shift
    return {
        key: {
            "params": {k: v.clone() for k, v in params.items()},
            "losses": [0.5, 0.25 + shift],
            "logits": torch.eye(3) + shift,
        }
        for key in ("step 1", "task 1", "task 2")
    }


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


def test_step_weights_zero_only_the_cls_position_entry(tmp_path):
    """L2P's step check: PILOT's prompts start at cl-bench's minus the [CLS] position
    entry e, which float32 undoes exactly only when e is zero."""
    pos = torch.arange(1.0, 13.0).reshape(1, 3, 4)
    weights = tmp_path / "w.pth"
    torch.save({"pos_embed": pos, "cls_token": torch.ones(1, 1, 4)}, weights)
    assert prompted.step_weights(weights, cls_pos_zero=False) == weights
    zeroed = torch.load(prompted.step_weights(weights, cls_pos_zero=True), weights_only=True)
    assert zeroed["pos_embed"][0, 0].tolist() == [0.0] * 4
    assert torch.equal(zeroed["pos_embed"][0, 1:], pos[0, 1:])
    assert torch.equal(zeroed["cls_token"], torch.ones(1, 1, 4))
    assert torch.equal(torch.load(weights, weights_only=True)["pos_embed"], pos)


def test_rows_compare_the_same_attention_under_a_float32_bound():
    from bench.parity.methods.dualprompt import row as dualprompt
    from bench.parity.methods.l2p import row as l2p

    assert prompted.BOUND == 1e-5
    assert l2p.ROW.step_cls_pos_zero and not dualprompt.ROW.step_cls_pos_zero
    assert inspect.signature(prompted.ours_step).parameters["fused"].default is False


def test_control_pairs_pilot_reseeded_with_the_kept_seeds(tmp_path):
    """The control reads the row's kept seeds and its own kept PILOT runs (no PILOT run
    here: every seed's reseeded curve is already in control.json)."""
    import json

    import pytest

    from bench.parity.__main__ import _seed_file
    from bench.parity.methods import ParityError
    from bench.parity.methods.dualprompt import row as dualprompt
    from bench.parity.prompted_control import control

    with pytest.raises(ParityError, match="seed 1 of dualprompt is not finished"):
        control(dualprompt, tmp_path)
    runs = {}
    for seed in dualprompt.SEEDS:
        kept = _seed_file(dualprompt, tmp_path / "work", seed)
        kept.parent.mkdir(parents=True, exist_ok=True)
        own = {"ours": {"curve": [90.0, 60.0 + seed]}, "reference": {"curve": [80.0, 60.0]}}
        paired = {"ours": {"curve": [1.0, 1.0]}, "reference": {"curve": [1.0, 1.0]}}
        kept.write_text(json.dumps({"seed": seed, **paired, "own": own}))
        (tmp_path / "work" / f"init_{seed}.pt").write_bytes(b"")
        runs[str(seed)] = {"curve": [80.0, 60.0 + (seed % 2)], "new_task": [80.0, 70.0]}
    (tmp_path / "control.json").write_text(json.dumps(runs))
    out = control(dualprompt, tmp_path)
    assert out["last"]["ours_minus_pilot"]["mean_diff"] == 5.5
    assert out["last"]["pilot_reseeded_minus_pilot"]["mean_diff"] == 0.5
    assert out["avg"]["reseeded"][:2] == [70.5, 70.0]
    assert out["reseeded_new_task"][0] == [80.0, 70.0]


def test_machinery_accuracies_are_the_argmax_per_task_and_on_the_newest_task():
    from bench.parity.prompted import accuracies

    record = {
        "task 1": {"logits": torch.tensor([[2.0, 1.0], [0.0, 1.0], [3.0, 0.0]])},
        "task 2": {
            "logits": torch.tensor([[1.0, 0, 0, 0], [0, 5.0, 0, 0], [0, 0, 0, 1.0], [0, 0, 0, 1.0]])
        },
    }
    labels = [torch.tensor([0, 1, 1]), torch.tensor([0, 1, 2, 3])]
    out = accuracies(record, labels)
    assert out["curve"] == pytest.approx([200 / 3, 75.0])
    assert out["new_task"] == pytest.approx([200 / 3, 50.0])


def test_a_seeds_batches_follow_its_seed_and_epochs(tmp_path):
    from bench.parity.prompted import batches

    tree = tmp_path / "tree"
    for split, n in (("train", 5), ("test", 2)):
        for c in range(6):
            folder = tree / split / f"k{c}"
            folder.mkdir(parents=True)
            for i in range(n):
                Image.new("L", (8, 8), color=10 * c + i).save(folder / f"{i}.png")
    a = torch.load(batches(tree, tmp_path / "a.pt", 32, 3, seed=1, epochs=3, batch=4))
    b = torch.load(batches(tree, tmp_path / "b.pt", 32, 3, seed=2, epochs=3, batch=4))
    assert len(a["tasks"]) == 3 and [len(t["train"]) for t in a["tasks"]] == [9, 9, 9]
    first = [int(y) for _, ys in a["tasks"][0]["train"][:3] for y in ys]
    assert sorted(first) == [0] * 5 + [1] * 5  # one epoch: every image of the task once
    order = [[float(x.sum()) for x in xs] for xs, _ in a["tasks"][0]["train"]]
    assert order != [[float(x.sum()) for x in xs] for xs, _ in b["tasks"][0]["train"]]
    assert [int(y) for _, ys in a["tasks"][2]["test"] for y in ys] == [0] * 2 + [1] * 2 + [
        2
    ] * 2 + [3] * 2 + [4] * 2 + [5] * 2
