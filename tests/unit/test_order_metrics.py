"""Class orders, task splits, the stream builder and the summary metrics
(LAMDA-PILOT's utils/data_manager.py and the conventions in cl_bench/metrics.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cl_bench.errors import UserError
from cl_bench.metrics import summarize
from cl_bench.scenarios.order import class_order, task_split, tasks_of
from cl_bench.scenarios.stream import build_stream, remap_labels

# ----------------------------------------------------------------------------- class order


@pytest.mark.parametrize(
    "n, head",
    [
        (100, [68, 56, 78, 8, 23, 84, 90, 65, 74, 76]),
        (200, [168, 136, 51, 9, 183]),
        (300, [169, 221, 146, 296, 92]),
        (50, [43, 41, 23, 14, 13]),
    ],
)
def test_class_order_pilot_seed_1993(n, head):
    order = class_order(n, 1993)
    assert order[: len(head)] == head
    assert sorted(order) == list(range(n))
    assert all(type(c) is int for c in order)


def test_class_order_leaves_numpy_global_state_alone():
    np.random.seed(123)
    expected = np.random.rand(3)
    np.random.seed(123)
    class_order(100, 1993)
    class_order(50, 7)
    assert np.array_equal(np.random.rand(3), expected)


def test_class_order_natural_without_seed():
    assert class_order(7) == list(range(7))


def test_class_order_explicit():
    assert class_order(4, seed=1993, explicit=[3, 1, 0, 2]) == [3, 1, 0, 2]
    assert class_order(3, explicit=np.array([2, 0, 1])) == [2, 0, 1]
    for bad in ([0, 1, 1], [0, 1], [0, 1, 2, 3], [1, 2, 3]):
        with pytest.raises(UserError, match="not a permutation"):
            class_order(3, explicit=bad)


# ----------------------------------------------------------------------------- task split


@pytest.mark.parametrize(
    "n, init, inc, sizes",
    [
        (10, 2, 2, [2, 2, 2, 2, 2]),
        (10, 3, 3, [3, 3, 3, 1]),  # remainder: extra, smaller last task
        (10, 10, 5, [10]),
        (10, 4, 2, [4, 2, 2, 2]),
        (7, 5, 5, [5, 2]),
    ],
)
def test_task_split(n, init, inc, sizes):
    assert task_split(n, init, inc) == sizes


@pytest.mark.parametrize(
    "n, inc, n_tasks",
    [(100, 5, 20), (100, 10, 10), (200, 20, 10), (200, 10, 20), (300, 30, 10), (50, 10, 5)],
)
def test_task_split_paper_benchmarks(n, inc, n_tasks):
    sizes = task_split(n, inc, inc)
    assert sizes == [inc] * n_tasks and sum(sizes) == n


def test_task_split_errors():
    with pytest.raises(UserError, match="larger than"):
        task_split(10, 11, 2)
    with pytest.raises(UserError, match="at least 1"):
        task_split(10, 0, 2)
    with pytest.raises(UserError, match="at least 1"):
        task_split(10, 2, 0)


def test_tasks_of():
    assert tasks_of([2, 2, 1]) == [[0, 1], [2, 3], [4]]
    assert tasks_of([3, 3, 3, 1]) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


# ----------------------------------------------------------------------------- stream

N_CLASSES, N_TRAIN, N_TEST = 10, 4, 3
ORDER = class_order(N_CLASSES, 1993)  # [4, 2, 7, 6, 0, 3, 5, 8, 9, 1]
SIZES = task_split(N_CLASSES, 3, 3)  # [3, 3, 3, 1]


def raw_split(n_per_class: int, offset: int):
    """Samples whose single feature is a unique id; classes interleaved."""
    n = N_CLASSES * n_per_class
    x = (offset + torch.arange(n)).float().unsqueeze(1)
    y = torch.arange(n) % N_CLASSES
    return x, y


def make_stream(test_shuffle: bool, seed: int = 0):
    train_x, train_y = raw_split(N_TRAIN, 0)
    test_x, test_y = raw_split(N_TEST, 1000)
    return build_stream(
        train_x, train_y, test_x, test_y, ORDER, SIZES, test_shuffle=test_shuffle, seed=seed
    )


def contents(experience) -> tuple[list[int], list[int]]:
    """(ids, labels) of an experience's samples, in stored order."""
    ds = experience.dataset
    ids, labels = [], []
    for i in range(len(ds)):
        x, y, *_ = ds[i]
        ids.append(int(x.item()))
        labels.append(int(y))
    return ids, labels


def original_class(sample_id: int) -> int:
    return (sample_id % 1000) % N_CLASSES


def test_remap_labels():
    assert ORDER == [4, 2, 7, 6, 0, 3, 5, 8, 9, 1]
    y = torch.tensor([4, 2, 1, 0, 9])
    assert remap_labels(y, ORDER).tolist() == [0, 1, 9, 4, 8]
    assert remap_labels(torch.tensor(ORDER), ORDER).tolist() == list(range(N_CLASSES))


def test_stream_train_experiences():
    stream = make_stream(test_shuffle=False)
    assert stream.tasks == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert stream.task_of_label.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert len(stream.train) == len(stream.seen_test) == 4
    all_ids = []
    for i, exp in enumerate(stream.train):
        assert exp.current_experience == i
        ids, labels = contents(exp)
        assert sorted(set(labels)) == stream.tasks[i]
        assert len(ids) == N_TRAIN * len(stream.tasks[i])
        for sid, label in zip(ids, labels, strict=True):
            assert ORDER[label] == original_class(sid)  # label = position in the order
        all_ids += ids
    assert sorted(all_ids) == list(range(N_CLASSES * N_TRAIN))


def test_stream_seen_test_sets():
    stream = make_stream(test_shuffle=False)
    for i, exp in enumerate(stream.seen_test):
        ids, labels = contents(exp)
        seen = [p for t in stream.tasks[: i + 1] for p in t]
        expected = sorted(
            1000 + k for k in range(N_CLASSES * N_TEST) if ORDER.index(original_class(k)) in seen
        )
        assert sorted(ids) == expected  # every seen-class test sample exactly once
        assert len(ids) == len(set(ids)) == N_TEST * len(seen)
        for sid, label in zip(ids, labels, strict=True):
            assert ORDER[label] == original_class(sid)


def test_stream_unshuffled_test_is_class_by_class():
    stream = make_stream(test_shuffle=False)
    ids, labels = contents(stream.seen_test[-1])
    assert labels == sorted(labels)
    assert labels == [p for p in range(N_CLASSES) for _ in range(N_TEST)]
    # stable within a class: the stored order of the raw test set
    for p in range(N_CLASSES):
        cls_ids = [s for s, lab in zip(ids, labels, strict=True) if lab == p]
        assert cls_ids == sorted(cls_ids)
    assert not stream.test_shuffle


def test_stream_shuffled_test_is_seeded_permutation():
    plain = contents(make_stream(test_shuffle=False).seen_test[-1])
    first = make_stream(test_shuffle=True, seed=5)
    ids, labels = contents(first.seen_test[-1])
    assert first.test_shuffle
    assert sorted(ids) == sorted(plain[0]) and ids != plain[0]
    assert labels != sorted(labels)
    assert contents(make_stream(test_shuffle=True, seed=5).seen_test[-1]) == (ids, labels)
    assert contents(make_stream(test_shuffle=True, seed=6).seen_test[-1])[0] != ids
    # earlier seen sets are the same shuffled order restricted to their classes
    ids1, labels1 = contents(first.seen_test[1])
    assert ids1 == [s for s, lab in zip(ids, labels, strict=True) if lab < 6]
    # training data does not depend on the test shuffle
    assert contents(first.train[2]) == contents(make_stream(test_shuffle=False).train[2])


# ----------------------------------------------------------------------------- metrics


def test_summarize_hand_example():
    A = [[90.0], [80.0, 70.0], [60.0, 65.0, 50.0]]
    seen = [90.0, 75.0, 58.0]
    s = summarize(A, seen)
    # PILOT: mean of acc_seen = (90 + 75 + 58) / 3 = 74.333..., last = 58
    assert s["avg_acc"] == pytest.approx(223 / 3)
    assert s["last_acc"] == 58.0
    # Mammoth: row means 90, 75, 58.333...; their mean (90 + 75 + 175/3) / 3 = 74.444...
    assert s["acc_task_mean"] == pytest.approx([90.0, 75.0, 175 / 3])
    assert s["avg_acc_task_mean"] == pytest.approx((90 + 75 + 175 / 3) / 3)
    assert s["last_acc_task_mean"] == pytest.approx(175 / 3)
    # forgetting: task 0 max(90, 80) - 60 = 30, task 1 70 - 65 = 5 -> 17.5
    assert s["forgetting"] == pytest.approx(17.5)
    # BWT: (60 - 90 + 65 - 70) / 2 = -17.5
    assert s["bwt"] == pytest.approx(-17.5)


def test_summarize_forgetting_uses_best_earlier_not_first():
    # task 0 peaks after task 1: forgetting (80 - 60 + 70 - 65) / 2 = 12.5,
    # BWT (60 - 50 + 65 - 70) / 2 = 2.5
    s = summarize([[50.0], [80.0, 70.0], [60.0, 65.0, 50.0]], [50.0, 75.0, 58.0])
    assert s["forgetting"] == pytest.approx(12.5)
    assert s["bwt"] == pytest.approx(2.5)


def test_summarize_single_task():
    s = summarize([[88.0]], [88.0])
    assert s["avg_acc"] == s["last_acc"] == s["avg_acc_task_mean"] == 88.0
    assert s["forgetting"] is None and s["bwt"] is None
