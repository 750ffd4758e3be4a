"""Avalanche in and out: ``scenario()`` returns the stream a run trains on as a standard
Avalanche benchmark, and a plain Avalanche strategy (a ``SupervisedTemplate`` subclass
that knows nothing about cl-bench) runs under ``cl-bench run`` through its card."""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from cl_bench.cards.places import ROOT
from cl_bench.errors import UserError
from cl_bench.scenarios.avalanche import scenario
from cl_bench.scenarios.loaders import LOADERS
from cl_bench.scenarios.transforms import ToModelInput
from tests.helpers.cli import ADVICE, invoke, refused

EXAMPLES = ROOT / "examples"
SYN = ["--scenario", "synthetic", "--image-size", "32", "--no-progress", "--precision", "fp32"]
# the example (Naive, linear head on the frozen features) on `synthetic`, seed 1993,
# offline EfficientNet-Lite0 at 32 px: each task learnt, the earlier ones forgotten
PLAIN = [
    [100.0],
    [0.0, 93.75],
    [0.0, 6.25, 100.0],
    [0.0, 0.0, 0.0, 93.75],
    [0.0, 0.0, 0.0, 0.0, 100.0],
]


def pilot_order(seed: int, n_classes: int) -> list[int]:
    """`class_order: seed`, PILOT's convention written out."""
    return np.random.RandomState(seed).permutation(n_classes).tolist()


def classes(stream) -> list[list[int]]:
    return [sorted(exp.classes_in_this_experience) for exp in stream]


def original_ids(stream, order: list[int]) -> list[Counter]:
    return [Counter(order[int(y)] for y in exp.dataset.targets) for exp in stream]


@pytest.mark.parametrize(
    ("name", "seed", "train_per_class", "test_per_class"),
    [("synthetic", 1993, 24, 8), ("synthetic", 7, 24, 8), ("fmnist", 1993, 500, 100)],
)
def test_scenario_streams_are_the_cards_split_in_its_class_order(
    name, seed, train_per_class, test_per_class
):
    bench = scenario(name, seed=seed, image_size=16)
    data = LOADERS[name]()
    order = pilot_order(seed, 10)  # both cards: class_order: seed, 5 tasks of 2 classes
    tasks = [order[i : i + 2] for i in range(0, 10, 2)]
    assert bench.class_order == order
    assert bench.class_names == [data.class_names[c] for c in order]
    for stream, per_class in (
        (bench.train_stream, train_per_class),
        (bench.test_stream, test_per_class),
    ):
        assert classes(stream) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
        assert original_ids(stream, order) == [
            Counter({a: per_class, b: per_class}) for a, b in tasks
        ]
        assert [exp.current_experience for exp in stream] == [0, 1, 2, 3, 4]
    assert sum(len(exp.dataset) for exp in bench.train_stream) == len(data.train_y)
    assert sum(len(exp.dataset) for exp in bench.test_stream) == len(data.test_y)
    assert [len(exp.dataset) for exp in bench.seen_test_stream] == [
        2 * test_per_class * (i + 1) for i in range(5)
    ]
    assert sorted(bench.train_stream[2].previous_classes) == [0, 1, 2, 3]
    # items are the data's images through the run's transforms, with remapped labels
    j = int(torch.nonzero(torch.isin(data.train_y, torch.tensor(tasks[0])))[0])
    x, y, task = bench.train_stream[0].dataset[0]
    assert torch.equal(x, ToModelInput(16)(data.train_x[j]))
    assert (y, task) == (order.index(int(data.train_y[j])), 0)
    k = int(torch.nonzero(data.test_y == order[0])[0])  # test stream: class by class
    x, y, _ = bench.test_stream[0].dataset[0]
    assert torch.equal(x, ToModelInput(16)(data.test_x[k])) and y == 0


@pytest.mark.parametrize(
    ("kwargs", "args"),
    [
        ({"name": "synthetc"}, ["--scenario", "synthetc"]),
        ({"name": "synthetic", "seed": -1}, ["--scenario", "synthetic", "--seeds", "-1"]),
        (
            {"name": "synthetic", "backbone": "resnet"},
            ["--scenario", "synthetic", "--backbone", "resnet"],
        ),
        ({"name": "synthetic", "image_size": 0}, ["--scenario", "synthetic", "--image-size", "0"]),
    ],
)
def test_bad_names_and_seeds_give_the_clis_errors(kwargs, args, tmp_path):
    with pytest.raises(UserError) as e:
        scenario(**kwargs)
    out = tmp_path / "out"
    result = invoke("run", "--methods", "simplecil", *args, "--no-progress", "--out", str(out))
    refused(result, e.value.paragraph(), out)
    assert result.stderr == f"error: {e.value.paragraph()}\n"


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory) -> tuple[object, dict]:
    """docs/own-method.md: the plain Avalanche example, as written there (at 32 px)."""
    out = tmp_path_factory.mktemp("plain")
    with pytest.MonkeyPatch.context() as mp:  # the card's folder joins sys.path: not past here
        mp.setattr(sys, "path", list(sys.path))
        result = invoke(
            "run",
            "--cards",
            f"{EXAMPLES}/",
            "--methods",
            "plain-avalanche",
            *SYN,
            "--out",
            str(out),
        )
    paths = sorted(out.glob("runs/synthetic/plain-avalanche/*.json"))
    return result, json.loads(paths[0].read_text()) if len(paths) == 1 else {}


def test_a_plain_avalanche_strategy_runs_through_its_card(plain_run):
    result, record = plain_run
    assert result.exit_code == 0, result.output
    assert record["status"] == "done" and record["method"] == "plain-avalanche"
    assert record["acc_matrix"] == PLAIN
    assert [len(row) for row in record["acc_matrix"]] == [1, 2, 3, 4, 5]
    # each task is learnt: far above chance over the classes seen so far
    assert all(record["acc_matrix"][i][i] >= 90 > 100 / (2 * (i + 1)) for i in range(5))
    assert record["config"]["method"] == {
        "name": "plain-avalanche",
        "epochs": 5,
        "batch_size": 16,
        "optimizer": "sgd",
        "lr": 0.05,
        "momentum": 0.9,
    }
    assert record["accounting"]["stored_per_task"] == [1280 * 10 + 10] * 5  # the linear head
    assert record["routing_acc"] is None


def test_a_run_trains_on_the_scenario_object(plain_run):
    _, record = plain_run
    bench = scenario("synthetic", seed=1993, image_size=32)
    assert record["class_order"] == bench.class_order == pilot_order(1993, 10)
    assert record["tasks"] == [
        [bench.class_order[p] for p in c] for c in classes(bench.train_stream)
    ]


def plain_cards(tmp_path: Path, text: str) -> Path:
    """A cards folder with the example's module and a card of ``text``."""
    folder = tmp_path / "cards"
    folder.mkdir()
    shutil.copy(EXAMPLES / "plain_avalanche.py", folder)
    (folder / "bare.yaml").write_text(text)
    return folder


CARD = (EXAMPLES / "plain-avalanche.yaml").read_text()
CONTRACT = CARD[CARD.index("contract:") : CARD.index("backbones:")]


def test_a_plain_class_whose_card_declares_nothing_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    folder = plain_cards(tmp_path, CARD.replace(CONTRACT, ""))
    out = tmp_path / "out"
    result = invoke("run", "--cards", str(folder), "--methods", "bare", *SYN, "--out", str(out))
    refused(result, "declares no method contract", out)
    assert result.stderr == (
        f"error: {folder / 'bare.yaml'}: strategy plain_avalanche:PlainNaive {ADVICE}\n"
    )


@pytest.mark.parametrize(
    ("old", "new", "sets", "needle"),
    [
        (
            "inputs: features",
            "inputs: pixels",
            [],
            "contract inputs 'pixels' / schedule 'per-task': inputs is one of features, images, "
            "images+query, adapted-features, schedule one of per-task, joint.",
        ),
        (
            "  model: plain_avalanche:linear_head",
            "",
            [],
            "`contract:` must be a mapping with exactly the keys inputs, trains_backbone, "
            "schedule, model; got {'inputs': 'features', 'trains_backbone': False, "
            "'schedule': 'per-task'}.",
        ),
        (
            "plain_avalanche:linear_head",
            "plain_avalanche:no_head",
            [],
            "contract model plain_avalanche:no_head cannot be imported (module "
            "'plain_avalanche' has no attribute 'no_head').",
        ),
        (
            "  lr: 0.05\n",
            "",
            [],
            "a plain Avalanche strategy is built from the settings epochs, "
            "batch_size, optimizer, lr; `defaults:` lacks lr.",
        ),
        (
            "trains_backbone: false",
            "trains_backbone: no-thanks",
            [],
            "contract trains_backbone must be true or false, not 'no-thanks'.",
        ),
        (
            "",
            "",
            ["--set", "bare.optimizer=rmsprop"],
            'bare.optimizer = "rmsprop" is not allowed; choose one of sgd, adam, adamw',
        ),
        (
            "",
            "",
            ["--set", "bare.epochs=0"],
            "bare.epochs = 0 is out of range: it must be at least 1",
        ),
        (
            "plain_avalanche:PlainNaive",
            "my_method:MyMethod",
            [],
            "MyMethod derives from cl_bench.contract.Method and declares its own contract; "
            "drop the card's `contract:` block",
        ),
    ],
)
def test_a_bad_contract_block_is_refused_before_anything_runs(
    tmp_path, monkeypatch, old, new, sets, needle
):
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert old in CARD
    folder = plain_cards(tmp_path, CARD.replace(old, new, 1) if old else CARD)
    shutil.copy(EXAMPLES / "my_method.py", folder)
    out = tmp_path / "out"
    refused(
        invoke("run", "--cards", str(folder), "--methods", "bare", *SYN, *sets, "--out", str(out)),
        needle,
        out,
    )
