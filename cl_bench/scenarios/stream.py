"""Turn per-sample inputs (images or frozen features) into an Avalanche benchmark.

The same builder serves image methods, features-only methods and
:func:`cl_bench.scenarios.avalanche.scenario` (the benchmark for users' own
Avalanche code), so all of them see exactly the same class order, task split and
test order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from avalanche.benchmarks.scenarios.dataset_scenario import (
    DatasetExperience,
    benchmark_from_datasets,
)
from avalanche.benchmarks.scenarios.generic_scenario import CLScenario, EagerCLStream
from avalanche.benchmarks.scenarios.supervised import with_classes_timeline
from avalanche.benchmarks.utils.classification_dataset import (
    _make_taskaware_classification_dataset as _wrap_dataset,
)
from avalanche.benchmarks.utils.classification_dataset import (
    _make_taskaware_tensor_classification_dataset as _tensor_dataset,
)
from torch.utils.data import Dataset

from cl_bench.scenarios.image_data import FileList
from cl_bench.scenarios.order import tasks_of
from cl_bench.scenarios.transforms import IndexedPath


@dataclass
class Stream:
    """Class-incremental stream.

    ``benchmark``: the Avalanche benchmark, ``train_stream`` (experience i: task
    i's training data) and ``test_stream`` (experience i: the test images of task
    i's classes, class by class), each experience with Avalanche's
    ``classes_in_this_experience`` and friends, and ``seen_test_stream``; labels
    are positions in the class order. ``train`` and ``seen_test``: its train and
    seen-test streams as lists (what :func:`cl_bench.contract.drive` runs on).
    ``seen_test[i]``: the test images of every class seen up to task i, in one
    experience, either in stored class order (PILOT's loader, ``shuffle=False``)
    or shuffled with the run seed. One evaluation pass over ``seen_test[i]`` fills
    row i of the accuracy matrix. ``tasks[i]``: label positions of task i.
    ``task_of_label``: position -> task.
    """

    train: list[DatasetExperience]
    seen_test: list[DatasetExperience]
    tasks: list[list[int]]
    task_of_label: torch.Tensor
    test_shuffle: bool
    benchmark: CLScenario


def remap_labels(y: torch.Tensor, order: Sequence[int]) -> torch.Tensor:
    """Original class id -> position in the class order."""
    lut = torch.empty(len(order), dtype=torch.long)
    lut[torch.as_tensor(list(order), dtype=torch.long)] = torch.arange(len(order))
    return lut[y.long()]


class _Files(Dataset):
    """(path, label[, query]) items; Avalanche's transform groups decode and transform
    the path, which carries the item's index (the seed of its training crop)."""

    def __init__(self, files: FileList, y: torch.Tensor, query: torch.Tensor | None) -> None:
        self.files, self.y, self.query = files, y, query

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        path = IndexedPath(self.files[i], i)
        if self.query is None:
            return path, int(self.y[i])
        return path, int(self.y[i]), self.query[i]


def _dataset(
    x: torch.Tensor | FileList,
    y: torch.Tensor,
    query: torch.Tensor | None,
    train_tf: Callable | None,
    eval_tf: Callable | None,
):
    """Items (input, label[, query], task)."""
    groups = None
    if train_tf is not None or eval_tf is not None:
        groups = {"train": (train_tf, None), "eval": (eval_tf, None)}
    if isinstance(x, FileList):
        return _wrap_dataset(
            _Files(x, y, query), task_labels=0, targets=y.tolist(), transform_groups=groups
        )
    tensors = (x, y) if query is None else (x, y, query)
    return _tensor_dataset(*tensors, task_labels=0, targets=y, transform_groups=groups)


def _take(query: torch.Tensor | None, idx: torch.Tensor) -> torch.Tensor | None:
    return None if query is None else query[idx]


def build_stream(
    train_x: torch.Tensor | FileList,
    train_y: torch.Tensor,
    test_x: torch.Tensor | FileList,
    test_y: torch.Tensor,
    order: Sequence[int],
    sizes: Sequence[int],
    *,
    test_shuffle: bool,
    seed: int,
    train_transform: Callable | None = None,
    eval_transform: Callable | None = None,
    train_query: torch.Tensor | None = None,
    test_query: torch.Tensor | None = None,
) -> Stream:
    """Split remapped data into tasks. ``train_y``/``test_y`` are original ids.
    ``train_query``/``test_query`` (N, dim), when given, travel with each sample as
    a third item (the prompt methods' cached queries).

    Each task's data keeps the stored sample order, and Avalanche's
    ``benchmark_from_datasets`` makes the streams: ``class_incremental_benchmark``
    would regroup an experience's samples class by class, which changes the
    shuffled mini-batches of every trained method (and every baseline number)."""
    tasks = tasks_of(sizes)
    task_of_label = torch.cat([torch.full((len(t),), i) for i, t in enumerate(tasks)])
    ytr, yte = remap_labels(train_y, order), remap_labels(test_y, order)
    ttr, tte = task_of_label[ytr], task_of_label[yte]
    # class by class, stable within a class: what PILOT's get_dataset produces
    class_sorted = torch.sort(yte, stable=True).indices
    gen = torch.Generator().manual_seed(seed)
    shuffled = class_sorted[torch.randperm(len(class_sorted), generator=gen)]
    test_index = shuffled if test_shuffle else class_sorted

    train, test, seen = [], [], []
    for i in range(len(tasks)):
        idx = torch.nonzero(ttr == i).squeeze(1)
        train.append(
            _dataset(
                train_x[idx], ytr[idx], _take(train_query, idx), train_transform, eval_transform
            ).train()
        )
        sel = class_sorted[tte[class_sorted] == i]
        test.append(
            _dataset(
                test_x[sel], yte[sel], _take(test_query, sel), train_transform, eval_transform
            ).eval()
        )
        # Avalanche evaluates experience by experience; a run scores one pass over the
        # union of the seen classes' test images in one (shuffled) order, because
        # batch-level choices (TOSCA's batch selection, batchwise prompts) depend on
        # which classes share a batch: no generator builds such experiences.
        sel = test_index[tte[test_index] <= i]
        ds = _dataset(
            test_x[sel], yte[sel], _take(test_query, sel), train_transform, eval_transform
        )
        seen.append(DatasetExperience(dataset=ds.eval(), current_experience=i))
    timeline = with_classes_timeline(benchmark_from_datasets(train=train, test=test))
    benchmark = CLScenario([*timeline.streams.values(), EagerCLStream("seen_test", seen)])
    return Stream(
        list(benchmark.train_stream),
        list(benchmark.seen_test_stream),
        tasks,
        task_of_label,
        test_shuffle,
        benchmark,
    )
