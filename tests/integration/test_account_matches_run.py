"""`cl-bench account` gives the numbers a run records, for every built-in method:
each card (made cheap: one epoch, batch 1, a narrow RanPAC or MiN projection) runs on a
tiny ImageFolder stream with a random ViT-Tiny at 32 px (a card that takes CNNs
only: EfficientNet-Lite0 at 64 px), and every field of the record's ``accounting`` equals
the one `account` prints at the same backbone, image size, tasks and classes.

Why an image folder and batch 1: `account` stands for the paper scenarios, whose
training augments images, so the prompt methods' query pass runs at every step
(in-memory scenarios reuse cached queries instead and record one pass fewer);
and `account` takes its training step on a batch of one, while a loss over the
whole batch (MOS's orthogonality term) costs a different amount per sample on a
larger batch. Both commands run on one thread: their steps are tiny, and two
OpenMP threads spin-waiting for a core that another job holds made the module
take six times as long.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cl_bench.cards.catalogue import METHODS_DIR, load_method
from cl_bench.engine.environment import threads
from tests.helpers.cards import card_variant
from tests.helpers.cli import invoke
from tests.helpers.trees import make_tree

BUILT_IN = sorted(p.stem for p in METHODS_DIR.glob("*.yaml"))
SHORT = {
    "epochs": 1,
    "init_epochs": 1,
    "batch_size": 1,
    "M": 100,
    "buffer_size": 100,
}  # where a card has the setting
TASKS, CLASSES = 3, 6  # two classes a task: a first task and two later ones
FIELDS = {
    "trainable_per_task",
    "added_per_task",
    "stored_per_task",
    "stored_at_end",
    "backbone_params",
    "backbone_gflops_per_pass",
    "inference_gflops_per_image",
    "train_gflops_per_sample",
}  # at least these are compared


def variant(name: str) -> str:
    return f"{name}-short"


def backbone_for(name: str) -> tuple[str, int]:
    """A random ViT-Tiny at 32 px, or for a card that takes CNNs only the embedded
    CNN at 64 px (2 x 2 values per channel for batch norm at a batch of one)."""
    if load_method(name).raw.get("backbones") == "cnn":
        return "efficientnet_lite0", 64
    return "vit_tiny_patch16_224", 32


def run_and_account(
    tmp: Path, cards: Path, root: Path, backbone: tuple[str, int], names: list[str]
) -> tuple[dict, dict]:
    """(record accounting, account row) per variant of ``names`` on ``backbone``."""
    methods = ",".join(variant(n) for n in names)
    shape = ["--backbone", backbone[0], "--image-size", str(backbone[1])]
    step, out = str(CLASSES // TASKS), tmp / backbone[0]
    with threads(1):
        ran = invoke(
            "run",
            "--out",
            str(out),
            "--cards",
            str(cards),
            "--methods",
            methods,
            "--scenario",
            "imagefolder",
            "--data-root",
            str(root),
            "--set",
            f"scenario.init_cls={step}",
            "--set",
            f"scenario.increment={step}",
            *shape,
            "--weights",
            "random",
            "--precision",
            "fp32",
            "--no-progress",
        )
        counted = invoke(
            "account",
            "--cards",
            str(cards),
            "--methods",
            methods,
            *shape,
            "--tasks",
            str(TASKS),
            "--classes",
            str(CLASSES),
            "--json",
        )
    assert ran.exit_code == 0, ran.output
    assert counted.exit_code == 0, counted.output
    records = [json.loads(p.read_text()) for p in out.glob("runs/imagefolder/*/*.json")]
    return (
        {r["method"]: r["accounting"] for r in records},
        {row["method"]: row for row in json.loads(counted.stdout)},
    )


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[dict, dict]:
    """(record accounting, account row) per built-in method, from one run and one
    account call per backbone over the cheap variants."""
    tmp = tmp_path_factory.mktemp("account")
    for name in BUILT_IN:
        defaults = load_method(name).raw["defaults"]
        cards = card_variant(
            tmp,
            METHODS_DIR,
            name,
            variant(name),
            defaults={**defaults, **{k: v for k, v in SHORT.items() if k in defaults}},
        )
    root = make_tree(tmp / "data", [f"c{k}" for k in range(CLASSES)], n_train=1, n_test=1)
    records, rows = {}, {}
    for backbone in sorted({backbone_for(n) for n in BUILT_IN}):
        found = run_and_account(
            tmp, cards, root, backbone, [n for n in BUILT_IN if backbone_for(n) == backbone]
        )
        records.update(found[0])
        rows.update(found[1])
    return records, rows


@pytest.mark.parametrize("name", BUILT_IN)
def test_account_equals_the_record(both, name):
    records, rows = both
    record, row = records[variant(name)], rows[variant(name)]
    assert FIELDS <= record.keys()
    assert {key: row[key] for key in record} == record
    assert row["inference_backbone_passes"] == (
        record["inference_gflops_per_image"] / record["backbone_gflops_per_pass"]
    )


def test_ease_trains_a_proxy_over_the_task_classes(both):
    """The placeholder experience holds both classes of its task: the adapter set
    (12 blocks, d = 192, width 64) and a 2-class cosine proxy with its sigma."""
    records, rows = both
    adapters = 12 * (2 * 192 * 64 + 64 + 192)
    assert rows[variant("ease")]["trainable_per_task"] == [adapters + 2 * 192 + 1] * TASKS
    assert records[variant("ease")]["trainable_per_task"] == [adapters + 2 * 192 + 1] * TASKS
