"""bench/parity/adapter_rows.py: the step check's comparison on constructed records (no
reference checkout needed): the largest differences per point, and the refusal of
records whose batches, labels or tensor names are not the same on both sides."""

from __future__ import annotations

import pytest
import torch

from bench.parity import adapter_rows as rows
from bench.parity.methods import ParityError


def record(shift: float = 0.0, loss_shift: float = 0.0) -> dict:
    params = {"adapter.0.down.weight": torch.ones(2, 3) + shift, "head.bias": torch.zeros(2)}
    points = {
        point: {"params": {k: v.clone() for k, v in params.items()}, "loss": 0.5 + loss_shift}
        for point in rows.AFTER
    }
    for point in rows.AFTER[1:]:
        points[point]["logits"] = torch.eye(3) + shift
    sums, labels = [torch.tensor([1.0, 2.0])], [torch.tensor([0, 1])]
    return {
        "points": points,
        "batch_sums": sums,
        "batch_labels": [torch.cat(labels * rows.STEP_EPOCHS)] * rows.STEP_TASKS,
        "train_labels": labels * rows.STEP_TASKS,
        "test_labels": [torch.arange(3)],
    }


def test_differences_are_the_largest_absolute_gaps_per_point():
    ours, ref = record(), record(shift=1e-3, loss_shift=-2e-3)
    got = rows.differences(ours, ref)
    assert got["after"] == rows.AFTER
    assert got["max_abs_param"] == pytest.approx([1e-3] * 3, rel=1e-4)  # float32 tensors
    assert got["max_abs_loss"] == pytest.approx([2e-3] * 3)
    assert got["max_abs_logit"] == pytest.approx([0.0, 1e-3, 1e-3], rel=1e-4)


def test_other_batches_labels_or_tensors_are_refused():
    ours, ref = record(), record()
    ref["batch_sums"] = [torch.tensor([1.0, 2.5])]
    with pytest.raises(ParityError, match="batches"):
        rows.differences(ours, ref)
    ref = record()
    ref["train_labels"] = [torch.tensor([1, 0])] * rows.STEP_TASKS
    with pytest.raises(ParityError, match="labels"):
        rows.differences(ours, ref)
    ref = record()
    ref["points"]["task 1"]["params"]["proxy.sigma"] = torch.ones(1)
    with pytest.raises(ParityError, match="name"):
        rows.differences(ours, ref)


def test_accuracies_read_the_argmax_per_task_and_the_newest_tasks_classes():
    # task 1: classes 0, 1; task 2 adds 2, 3. Rows are the test images, columns class ids.
    task1 = torch.tensor([[2.0, 1.0], [0.0, 1.0], [3.0, 0.0]])  # right, right, wrong
    task2 = torch.tensor([[1.0, 0, 0, 0], [0, 5.0, 0, 0], [0, 0, 0, 1.0], [0, 0, 0, 1.0]])
    run = {"points": {"task 1": {"logits": task1}, "task 2": {"logits": task2}}}
    labels = [torch.tensor([0, 1, 1]), torch.tensor([0, 1, 2, 3])]
    curve, learnt = rows.accuracies(run, labels)
    assert curve == pytest.approx([200 / 3, 75.0])
    assert learnt == pytest.approx([200 / 3, 50.0])  # task 2's images: labels 2 and 3


def test_a_longer_run_is_checked_against_its_own_epochs():
    ours, ref = record(), record()
    ref["train_labels"] = [torch.tensor([0, 1])] * rows.STEP_TASKS
    ours["batch_labels"] = [torch.tensor([0, 1] * 3)] * rows.STEP_TASKS
    with pytest.raises(ParityError, match="labels"):
        rows.same_inputs(ours, ref)
    rows.same_inputs(ours, ref, epochs=3)


def test_a_paired_seed_runs_both_sides_on_one_spec_and_compares_their_outputs(
    monkeypatch, tmp_path
):
    epochs = rows.TRAIN["mos"]["epochs"]
    labels = [torch.tensor([0, 1]), torch.tensor([0, 1, 2, 3])]

    def side(second: torch.Tensor) -> dict:
        return {
            "points": {"task 1": {"logits": torch.eye(2)}, "task 2": {"logits": second}},
            "batch_sums": [torch.tensor([1.0, 2.0] * epochs)],
            "batch_labels": [torch.tensor([0, 1] * epochs)],
            "train_labels": [torch.tensor([0, 1])],
            "test_labels": labels,
        }

    ours = side(torch.eye(4))
    ref = side(torch.eye(4) + torch.tensor([[0, 2.0, 0, 0]] + [[0.0] * 4] * 3))
    seen = {}

    def ours_step(method, work, seed, params, *args, tasks):
        seen.update(params=params, tasks=tasks)
        return ours

    def run_pilot(copy, work, spec, name, env, driver):
        seen.update(spec=spec, name=name, env=env)
        return ref

    monkeypatch.setattr(rows, "ours_step", ours_step)
    monkeypatch.setattr(rows, "run_pilot", run_pilot)
    monkeypatch.setattr(rows, "step_specs", lambda *a, **k: {"args": a[5], "step": k})
    monkeypatch.setattr(rows, "pilot_args", lambda copy, method, seed, train: {"lr": train["lr"]})
    out = rows.paired_seed("mos", tmp_path, tmp_path, 7, env={"X": "1"}, tasks=2)
    assert seen["params"] == {
        "epochs": epochs,
        "lr": rows.TRAIN["mos"]["lr"],
        "batch_size": rows.TRAIN["mos"]["batch"],
    }
    assert seen["tasks"] == 2 and seen["name"] == "mos_seed_7" and seen["env"] == {"X": "1"}
    assert seen["spec"]["args"] == {"lr": rows.TRAIN["mos"]["lr"]}
    assert out["ours"] == {"curve": [100.0, 100.0], "learnt": [100.0, 100.0]}
    # the reference's first test image now ranks class 1 first: 3 of 4, task 1's images 1 of 2
    assert out["reference"] == {"curve": [100.0, 75.0], "learnt": [100.0, 100.0]}
    assert out["max_abs_logit"] == 2.0
    ref["batch_labels"] = [torch.tensor([1, 0] * epochs)]
    ours["batch_labels"] = [torch.tensor([1, 0] * epochs)]
    with pytest.raises(ParityError, match="labels"):
        rows.paired_seed("mos", tmp_path, tmp_path, 7, tasks=2)
