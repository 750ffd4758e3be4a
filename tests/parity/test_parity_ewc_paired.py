"""The EWC parity row's paired seeds (bench/parity/methods/ewc/row.py ``perms_of``, and the
driver's ``Reorder`` and ``accuracies`` that both sides use): the batch order is a
permutation per task drawn from the seed, read as given by an Avalanche strategy, and
the curves come from the test logits. Needs neither Avalanche's checkout nor the peer
venv (the driver's shared pieces import only avalanche and torch)."""

from __future__ import annotations

import torch
from avalanche.benchmarks.scenarios.dataset_scenario import benchmark_from_datasets
from avalanche.benchmarks.utils.classification_dataset import (
    _make_taskaware_tensor_classification_dataset as tensor_dataset,
)
from avalanche.core import SupervisedPlugin
from avalanche.training.plugins.evaluation import EvaluationPlugin
from avalanche.training.supervised import Naive
from torch import nn

from bench.parity.methods.ewc import row
from bench.parity.methods.ewc.reference import Reorder, accuracies


def test_perms_of_draws_one_permutation_per_task_from_the_seed():
    perms = row.perms_of(1993)
    assert len(perms) == 5
    for p in perms:
        assert sorted(p.tolist()) == list(range(48))
    assert not torch.equal(perms[0], perms[1])
    assert all(torch.equal(a, b) for a, b in zip(perms, row.perms_of(1993), strict=True))
    assert not torch.equal(perms[0], row.perms_of(1994)[0])


class _Labels(SupervisedPlugin):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def before_forward(self, strategy, **kwargs) -> None:
        self.seen += strategy.mb_y.tolist()


def test_reorder_feeds_each_tasks_samples_in_the_given_order_every_epoch():
    y = [torch.arange(6), torch.arange(6, 10)]
    train = [tensor_dataset(torch.zeros(len(t), 3), t, task_labels=0, targets=t) for t in y]
    stream = benchmark_from_datasets(train=train, test=train).train_stream
    perms = [torch.tensor([3, 0, 5, 1, 4, 2]), torch.tensor([2, 3, 1, 0])]
    model = nn.Linear(3, 10)
    labels = _Labels()
    strategy = Naive(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        nn.CrossEntropyLoss(),
        train_mb_size=4,
        train_epochs=2,
        device="cpu",
        plugins=[Reorder(perms), labels],
        evaluator=EvaluationPlugin(loggers=[]),
    )
    for exp in stream:
        strategy.train(exp, shuffle=False, num_workers=0)
    assert labels.seen == [3, 0, 5, 1, 4, 2] * 2 + [8, 9, 7, 6] * 2


def test_accuracies_of_the_seen_classes_and_of_the_task_just_trained():
    data = {
        "tasks": [[0, 1], [2, 3]],
        "test_x": torch.zeros(8, 3, 2, 2, dtype=torch.uint8),
        "test_y": torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]),
    }
    # after task 1: columns (0, 1), 3 of 4 right; after task 2: columns 0..3
    first = torch.tensor([[1.0, 0], [1, 0], [0, 1], [1, 0]])
    second = torch.tensor(
        [
            [9.0, 0, 0, 0],
            [0, 0, 9, 0],
            [0, 9, 0, 0],
            [0, 9, 0, 0],
            [0, 0, 9, 0],
            [0, 0, 0, 9],
            [0, 0, 0, 9],
            [0, 0, 0, 9],
        ]
    )
    got = accuracies(data, [first, second])
    assert got == {"curve": [75.0, 75.0], "just_learnt": [75.0, 75.0]}
