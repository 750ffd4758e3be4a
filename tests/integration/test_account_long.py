"""`cl-bench account` on a long stream. Where a method declares that its tasks repeat
(:meth:`cl_bench.contract.Method.repeats_after`), its first tasks run and each count is
carried to the last task (:mod:`cl_bench.accounting.extend`); every field of its row
then equals what running every task gives (``--every-task``). Checked for every built-in
card that declares it, over 12 tasks of 2 classes on a random ViT-Tiny at 32 px, with
the cheap variants of test_account_matches_run.py (batch 1, narrow RanPAC and MiN
projections, DualPrompt with a pool of 2 E-prompts so that it too repeats within 12 tasks),
on one thread."""

from __future__ import annotations

import json

import pytest

from cl_bench.accounting.extend import tasks_to_run
from cl_bench.cards.catalogue import METHODS_DIR, load_method
from cl_bench.cards.strategy import strategy_of
from cl_bench.contract import Schedule, spec_of
from cl_bench.engine.environment import threads
from tests.helpers.cards import card_variant
from tests.helpers.cli import invoke

TASKS, CLASSES = 12, 24
SHORT = {"batch_size": 1, "M": 100, "buffer_size": 100}  # where a card has the setting
SHORT_FOR = {  # one card's setting, not another's
    "dualprompt": {"pool_size": 2},
    "care": {"iter_pred_max_task": 1},  # T + 1 test passes end within the stream
    "sldc": {"ca_samples": 16},  # its refinement's steps, at batch 1, are most of its time
}


def declared(name: str) -> int | None:
    """The tasks after which the card's method says its tasks repeat, or None."""
    card = load_method(name)
    cls = strategy_of(card)
    if spec_of(cls).schedule is not Schedule.PER_TASK or not hasattr(cls, "repeats_after"):
        return None
    return cls.repeats_after({**card.params, **SHORT_FOR.get(name, {})}, TASKS)


REPEATING = sorted(p.stem for p in METHODS_DIR.glob("*.yaml") if declared(p.stem) is not None)


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> tuple[dict, dict]:
    """(carried, every task run) row per repeating built-in method."""
    tmp = tmp_path_factory.mktemp("long")
    for name in REPEATING:
        defaults = load_method(name).raw["defaults"]
        cards = card_variant(
            tmp,
            METHODS_DIR,
            name,
            f"{name}-short",
            defaults={
                **defaults,
                **{k: v for k, v in SHORT.items() if k in defaults},
                **SHORT_FOR.get(name, {}),
            },
        )
    shape = ["--backbone", "vit_tiny_patch16_224", "--image-size", "32"]
    methods = ",".join(f"{n}-short" for n in REPEATING)
    common = ["--cards", str(cards), "--methods", methods, *shape]
    counts = ["--tasks", str(TASKS), "--classes", str(CLASSES), "--json", "--no-progress"]
    with threads(1):
        carried = invoke("account", *common, *counts)
        every = invoke("account", *common, *counts, "--every-task")
    assert carried.exit_code == 0, carried.output
    assert every.exit_code == 0, every.output
    return tuple(
        {r["method"].removesuffix("-short"): r for r in json.loads(out.stdout)}
        for out in (carried, every)
    )


def test_the_long_stream_is_carried_for_most_methods():
    assert {"ease", "mos", "tosca", "tuna", "l2p", "simplecil", "care", "sldc"} <= set(REPEATING)


@pytest.mark.parametrize("name", REPEATING)
def test_carried_counts_equal_every_task_run(rows, name):
    carried, every = rows[0][name], rows[1][name]
    assert carried["method"] == every["method"] == f"{name}-short"
    assert carried["tasks_run"] == tasks_to_run(declared(name), TASKS) < TASKS
    assert every["tasks_run"] == TASKS
    assert len(carried["stored_per_task"]) == TASKS
    assert {k: v for k, v in carried.items() if k != "tasks_run"} == {
        k: v for k, v in every.items() if k != "tasks_run"
    }
