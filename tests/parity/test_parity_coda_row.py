"""bench/parity/methods/coda_prompt/row.py: the step check's and the paired seeds' arithmetic
on constructed driver outputs (no reference, no training), the paired setting, and the
PILOT patch on a toy file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.parity import patch_pilot_class_order
from bench.parity.methods.coda_prompt import row

AFTER = ("step 1", "task 1", "task 2")


def side(shift: float, ortho: float) -> dict:
    params = {"p": torch.zeros(2, 4, 2, 3), "k": torch.zeros(2, 4, 3), "head.bias": torch.zeros(5)}
    out = {
        "after": {
            k: {
                "params": {n: t + shift * (i + 1) for n, t in params.items()},
                "logits": torch.full((3, 2), shift),
            }
            for i, k in enumerate(AFTER)
        },
        "losses": [[1.0, 0.5], [0.7, 0.6 + shift]],
        "ortho": [[ortho, ortho], [ortho, 0.0]],
    }
    return out


def test_differences_per_point():
    diff = row._differences(side(0.0, 0.2), side(1e-3, 0.2))
    assert diff["after"] == list(AFTER)
    assert diff["max_abs_param"] == pytest.approx([1e-3, 2e-3, 3e-3])
    assert diff["params_over_tight"] == [2 * 4 * 2 * 3 + 2 * 4 * 3 + 5] * 3
    assert diff["params"] == 2 * 4 * 2 * 3 + 2 * 4 * 3 + 5
    assert diff["max_abs_loss"] == pytest.approx([0.0, 0.0, 1e-3])
    assert diff["max_abs_logit"] == pytest.approx([1e-3] * 3)
    assert diff["ortho_term"] == {"largest": 0.2, "max_abs_diff": 0.0}


def test_gram_schmidt_matches_row_signs_and_measures_orthogonality():
    q = torch.linalg.qr(torch.randn(6, 4, generator=torch.Generator().manual_seed(0))).Q.T
    init = [{n: q[None].clone() for n in ("p", "k", "a")} for _ in range(2)]
    flipped = q * torch.tensor([[1.0], [-1.0], [1.0], [-1.0]])
    ref = {
        "gram_schmidt": [
            {n: flipped[None, :2] for n in ("p", "k", "a")},
            {n: flipped[None, 2:] for n in ("p", "k", "a")},
        ]
    }
    gs = row._gram_schmidt({"init": init}, ref)
    assert gs[0]["sign_flipped"] == pytest.approx(0.5)
    assert gs[0]["max_abs_after_sign"] < 1e-6 and gs[1]["max_abs_after_sign"] < 1e-6
    assert gs[1]["max_cos_old_ours"] < 1e-6 and gs[1]["max_cos_old_reference"] < 1e-6


def test_patch_pilot_class_order_applies_once_and_refuses_an_unknown_file(tmp_path: Path):
    data = tmp_path / "utils" / "data.py"
    data.parent.mkdir()
    data.write_text("import numpy as np\n\n" + patch_pilot_class_order.ANCHOR)
    patch_pilot_class_order.patch(tmp_path)
    once = data.read_text()
    assert "PARITY_CLASS_ORDER" in once and "np.arange(10)" not in once
    patch_pilot_class_order.patch(tmp_path)
    assert data.read_text() == once
    data.write_text("nothing to patch\n")
    with pytest.raises(SystemExit, match="anchor"):
        patch_pilot_class_order.patch(tmp_path)


def test_accuracies_over_seen_classes_and_on_the_newest_task():
    # 2 test images per class, 2 tasks of 2 classes; logits of the seen classes only
    test_y = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    first = torch.eye(2)[[0, 0, 1, 0]]  # task 1: 3 of 4 right
    second = torch.eye(4)[[0, 0, 1, 1, 2, 1, 1, 1]]  # task 2: 2 of its 4 to class 1
    run = {"after": {"task 1": {"logits": first}, "task 2": {"logits": second}}}
    out = row.accuracies(run, test_y, 2)
    assert out["curve"] == pytest.approx([75.0, 62.5])
    assert out["learnt"] == pytest.approx([75.0, 25.0])


def test_paired_setting_shares_the_seed_and_turns_augmentation_off():
    assert row.PAIRING == "paired" and row.SEEDS == list(range(1, 11))
    assert row.TRAIN["tasks"] * row.TRAIN["increment"] == len(row.CLASS_ORDER) == 6
    assert row.TRAIN["gram_schmidt"] == "qr" and row.TRAIN["ortho_mu"] == 0.0
    assert row.SETTING["augmentation"].startswith("off")
    assert row.STEP["tasks"] == 2 and row.STEP["ortho_mu"] == 1.0


def test_worst_first_step_gives_the_gradient_behind_adams_step():
    # Adam's first step is lr g / (|g| + eps): 0.2 lr means |g| = eps / 4
    start = {"p": torch.zeros(4), "head.bias": torch.zeros(2)}
    after = {"p": torch.tensor([1e-3, 2e-4, 1e-3, 1e-3]), "head.bias": torch.full((2,), 1e-3)}
    moved = {"p": after["p"] + torch.tensor([0.0, 1e-5, 0.0, 0.0]), "head.bias": after["head.bias"]}
    ours = {"init": [start], "params": {"lr": 1e-3}, "after": {"step 1": {"params": after}}}
    ref = {"after": {"step 1": {"params": moved}}}
    worst = row.worst_first_step(ours, ref)
    assert worst["tensor"] == "p"
    assert worst["step_over_lr"] == pytest.approx(0.2, rel=1e-5)
    assert worst["gradient"] == pytest.approx(2.5e-9, rel=1e-4)


def test_gaps_per_task_and_flipped_predictions():
    a, b = side(0.0, 0.2), side(1e-3, 0.2)
    b["after"]["task 2"]["logits"] = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 2.0]])
    gap = row.gaps(a, b, ["task 1", "task 2"])
    assert gap["max_abs_param"] == pytest.approx([2e-3, 3e-3])
    assert gap["max_abs_logit"] == pytest.approx([1e-3, 2.0])
    assert gap["argmax_flips"] == [0, 2]  # a: argmax 0 on every row; b: 0, 1, 1
