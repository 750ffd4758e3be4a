"""The RanPAC parity row's paired seeds (bench/parity/methods/ranpac/row.py): the curves come
from each side's test logits by one function, the lambda from the lowest validation
loss, and the step machinery's files of a paired seed do not overwrite the step
check's. Needs neither PILOT's checkout nor the peer venv."""

from __future__ import annotations

import pytest
import torch

from bench.parity import first_session_rows as fs
from bench.parity.methods.ranpac import row


def test_accuracies_over_the_seen_classes_and_of_the_newest_task():
    labels = [torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 2, 2, 3, 3])]
    first = torch.tensor([[2.0, 1], [2, 1], [1, 2], [2, 1]])  # 3 of 4
    second = torch.tensor(
        [[5.0, 0, 0, 0], [0, 5, 0, 0], [0, 0, 5, 0], [0, 5, 0, 0], [0, 0, 0, 5], [0, 0, 0, 5]]
    )  # 5 of 6; new: 3 of 4
    got = fs.accuracies([first, second], labels)
    assert got["curve"] == pytest.approx([75.0, 500.0 / 6], abs=1e-12)
    assert got["learnt"] == [75.0, 75.0]


def test_chosen_is_the_candidate_of_the_lowest_loss():
    losses = [1.0] * len(row.CANDIDATES)
    losses[11] = 0.5
    assert row.chosen(losses) == row.CANDIDATES[11]


def test_a_paired_seed_has_its_own_files_the_step_check_keeps_its_names():
    assert fs.tag_of(fs.STEP_SEED, 2) == ""
    assert fs.tag_of(1993, 5) == "-seed1993-tasks5"
    assert fs.tag_of(fs.STEP_SEED, 5) != fs.tag_of(1993, 5)
