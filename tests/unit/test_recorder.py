"""The recorder's evaluation bookkeeping: predictions, labels and routing go into one
array each for the whole evaluation (no small tensor kept per batch: between the
batches' image buffers they fragmented the heap), and the accuracy row comes from them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from cl_bench.engine.recording import Recorder

TASK_OF_LABEL = torch.tensor([0, 0, 1, 1])  # labels 0, 1: task 0; labels 2, 3: task 1


def batch(strategy, logits: list[list[float]], y: list[int], route: list[int] | None):
    strategy.mb_output, strategy.mb_y = torch.tensor(logits), torch.tensor(y)
    strategy.routing = lambda: None if route is None else torch.tensor(route)


def evaluate(batches, n: int) -> tuple[Recorder, SimpleNamespace]:
    recorder = Recorder(TASK_OF_LABEL, progress=False)
    strategy = SimpleNamespace(experience=SimpleNamespace(dataset=range(n)))
    recorder.before_eval_exp(strategy)
    arrays = (recorder._pred, recorder._y)
    for logits, y, route in batches:
        batch(strategy, logits, y, route)
        recorder.after_eval_iteration(strategy)
        assert recorder._pred is arrays[0] and recorder._y is arrays[1]  # the same arrays
    recorder.after_eval_exp(strategy)
    return recorder, strategy


def test_one_array_per_field_and_the_row_from_it():
    recorder, _ = evaluate(
        [
            ([[0, 9, 0, 0], [9, 0, 0, 0], [0, 0, 9, 0]], [1, 0, 3], [0, 0, 1]),  # 2 of 3 right
            ([[0, 0, 0, 9], [0, 9, 0, 0]], [3, 2], [1, 0]),  # 1 of 2 right
        ],
        n=5,
    )
    assert recorder._pred.tolist() == [1, 0, 2, 3, 1]
    assert recorder._y.tolist() == [1, 0, 3, 3, 2]
    assert recorder._route.tolist() == [0, 0, 1, 1, 0]
    assert recorder.acc_matrix == [[100.0, 100 / 3]]
    assert recorder.acc_seen == [60.0]
    assert recorder.routing_acc == [80.0]


def test_no_routing_is_none():
    recorder, _ = evaluate([([[9, 0, 0, 0]], [0], None)], n=1)
    assert recorder._route is None and recorder.routing_acc == [None]


def test_an_evaluation_short_of_its_dataset_is_refused():
    with pytest.raises(RuntimeError, match="held 1 samples of 2"):
        evaluate([([[9, 0, 0, 0]], [0], None)], n=2)
