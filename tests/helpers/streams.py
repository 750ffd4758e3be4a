"""Small data in memory: a synthetic stream of 3 tasks, and a balanced subset of a
scenario's images."""

from __future__ import annotations

import torch

from cl_bench.scenarios.image_data import ImageData
from cl_bench.scenarios.loaders import synthetic
from cl_bench.scenarios.order import task_split
from cl_bench.scenarios.stream import Stream, build_stream
from cl_bench.scenarios.transforms import ToModelInput


def small_stream() -> Stream:
    """4 synthetic classes (8 training, 4 test images each, 32 px) in 3 tasks."""
    data = synthetic(n_classes=4, train_per_class=8, test_per_class=4, size=32)
    tf = ToModelInput(32)
    return build_stream(
        data.train_x,
        data.train_y,
        data.test_x,
        data.test_y,
        [2, 0, 3, 1],
        task_split(4, 2, 1),
        test_shuffle=True,
        seed=1993,
        train_transform=tf,
        eval_transform=tf,
    )


def balanced_subset(data: ImageData, n_train: int, n_test: int) -> ImageData:
    """The first images of each class in turn (every class present), so a run sees
    n_train / n_test images: feature chunks of 32 on CPU leave 1 to 3 at the end."""

    def take(x, y, n):
        rank = torch.zeros_like(y)
        for c in y.unique():
            rank[y == c] = torch.arange(int((y == c).sum()))
        idx = torch.argsort(rank * data.n_classes + y)[:n]
        return x[idx], y[idx]

    train_x, train_y = take(data.train_x, data.train_y, n_train)
    test_x, test_y = take(data.test_x, data.test_y, n_test)
    return ImageData(data.name, train_x, train_y, test_x, test_y, data.class_names)
