"""Long task sequences: the generated scenario ``synthetic-long`` (100 tasks of one class)
splits as its card declares, with the dataset's own classes, and the feature methods
run all of its 100 tasks, each keeping what its accounting says it adds per task."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cl_bench
from cl_bench.cards.catalogue import load_scenario
from cl_bench.scenarios import load_data
from cl_bench.scenarios.transforms import eval_transform

VIT = dict(backbone="vit_tiny_patch16_224", weights="random", image_size=32)
TASKS, TRAIN, TEST, SEED = 100, 4, 2, 1993  # benchmarks/synthetic-long.yaml
D = 192  # ViT-Tiny's width


def test_the_long_scenario_is_one_real_class_per_task():
    """Experience i holds the 4 training and 2 test images of one dataset class, the
    class at position i of PILOT's permutation for the seed; every class once."""
    bench = cl_bench.scenario("synthetic-long", seed=SEED, **VIT)
    order = np.random.RandomState(SEED).permutation(TASKS).tolist()
    assert list(bench.class_order) == order
    assert len(bench.train_stream) == len(bench.test_stream) == TASKS
    data = load_data(load_scenario("synthetic-long"), None)
    assert data.n_classes == TASKS
    to_model = eval_transform(False, 32)  # in-memory images at the ViT's 32 px
    for i, (train, test) in enumerate(zip(bench.train_stream, bench.test_stream, strict=True)):
        assert list(train.classes_in_this_experience) == [i]
        assert list(test.classes_in_this_experience) == [i]
        assert len(train.dataset) == TRAIN and len(test.dataset) == TEST
        for split, x, y in ((train, data.train_x, data.train_y), (test, data.test_x, data.test_y)):
            own = x[torch.as_tensor(y) == order[i]]
            expected = torch.stack([to_model(image) for image in own])
            got = torch.stack([split.dataset[k][0] for k in range(len(own))])
            assert torch.equal(got, expected), i


def luca(d: int, ratio: int = 16) -> int:
    """One LuCA module (cl_bench/strategies/blocks/luca.py): the adapter's two linear
    layers with biases, the LayerNorm and the calibrator's two linear layers."""
    h = d // ratio
    return (d * h + h + h * d + d) + 2 * d + 2 * d * h


@pytest.fixture(scope="module")
def hundred_tasks(tmp_path_factory) -> dict:
    """SimpleCIL, TOSCA and RanPAC (projection M = 256) over the 100 tasks, 1 epoch."""
    done = cl_bench.run(
        ["simplecil", "tosca", "ranpac"],
        scenario="synthetic-long",
        seeds=[SEED],
        out=tmp_path_factory.mktemp("long"),
        precision="fp32",
        settings={"tosca.epochs": 1, "ranpac.epochs": 1, "ranpac.M": 256},
        echo=None,
        **VIT,
    )
    return {r.method: r for r in done}


@pytest.mark.parametrize("method", ["simplecil", "tosca", "ranpac"])
def test_a_feature_method_runs_all_100_tasks(hundred_tasks, method):
    r = hundred_tasks[method]
    order = np.random.RandomState(SEED).permutation(TASKS).tolist()
    assert r.class_order == order
    assert r.tasks == [[c] for c in order]
    assert [len(row) for row in r.acc_matrix] == list(range(1, TASKS + 1))
    assert len(r.acc_seen) == len(r.timing["train_s"]) == TASKS


def test_what_each_task_adds_is_one_class_or_one_module(hundred_tasks):
    """After the first task each task adds the same: SimpleCIL a prototype (d), TOSCA a
    LuCA module and a classifier row (d), RanPAC a column of C and a row of W_o (M each);
    one backbone pass per test image for all three (TOSCA runs its modules on it)."""
    added = {m: r.accounting["added_per_task"] for m, r in hundred_tasks.items()}
    assert added["simplecil"][1:] == [D] * (TASKS - 1)
    assert added["tosca"][1:] == [luca(D) + D] * (TASKS - 1)
    assert luca(D) == 9_804
    assert added["ranpac"][1:] == [2 * 256] * (TASKS - 1)
    for r in hundred_tasks.values():
        a = r.accounting
        assert a["stored_at_end"] == sum(a["added_per_task"])
        assert a["backbone_gflops_per_pass"] <= a["inference_gflops_per_image"]
        assert a["inference_gflops_per_image"] < 2 * a["backbone_gflops_per_pass"]
