"""No host sync at every step: the finiteness watch reads the device once per training
epoch and once per evaluated experience (and still names the first non-finite
iteration); class masks, column indices and normalisation constants reach the device
once per task, and every forward of the task reuses the same tensor."""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from avalanche.core import SupervisedPlugin

from cl_bench.backbones.base import Backbone, channel_stats
from cl_bench.contract import Bookkeeping, drive
from cl_bench.engine import finite
from cl_bench.engine.finite import FiniteWatch
from cl_bench.errors import UserError
from cl_bench.strategies.blocks.device_cache import DeviceCache
from tests.helpers.strategies import run_tiny, strategy, vit_backbone
from tests.helpers.streams import small_stream

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread

EPOCHS = 2
ITERATIONS = EPOCHS * (4 + 2 + 2)  # 16, 8 and 8 training images at batch 4, per epoch
EVALUATIONS = 3  # one evaluated experience after each of the 3 tasks


@pytest.fixture
def host_reads(monkeypatch) -> list:
    """Every value the watch reads back from the device, in order."""
    reads = []

    def to_host(t: torch.Tensor):
        reads.append(t.tolist())
        return reads[-1]

    monkeypatch.setattr(finite, "to_host", to_host)
    return reads


class Iterations(Bookkeeping, SupervisedPlugin):
    """Whether each training iteration's loss was finite; with ``poison`` = {(task,
    epoch, iteration): value}, that iteration's loss is multiplied by ``value`` before
    the watch sees it."""

    def __init__(self, poison: dict | None = None) -> None:
        super().__init__()
        self.poison, self.finite = poison or {}, []

    def before_backward(self, strategy, **kwargs) -> None:
        clock = strategy.clock
        at = (clock.train_exp_counter, clock.train_exp_epochs, clock.train_epoch_iterations)
        if at in self.poison:
            strategy.loss = strategy.loss * self.poison[at]
        self.finite.append(bool(torch.isfinite(strategy.loss).all()))


def watch() -> FiniteWatch:
    return FiniteWatch("tiny", {"lr": 0.01}, {"lr": 0.01})


def test_the_watch_reads_the_device_once_per_epoch_and_once_per_evaluation(host_reads):
    iterations = Iterations()
    run_tiny("fp32", [iterations, watch()], epochs=EPOCHS)
    assert len(iterations.finite) == ITERATIONS and all(iterations.finite)
    # per task: each epoch's (no bad iteration, no bad loss, weights finite), its evaluation
    assert host_reads == ([[-1.0, 0.0, 1.0]] * EPOCHS + [True]) * EVALUATIONS


def test_a_step_of_the_watch_reads_nothing_back(monkeypatch):
    """At every step the watch only queues work on the device: reading a tensor back
    in any way (bool, item, float, int, tolist) would fail here."""
    w, clock = watch(), SimpleNamespace(train_epoch_iterations=0)
    step = SimpleNamespace(
        loss=torch.tensor([float("nan")]),
        clock=clock,
        mb_output=torch.tensor([[0.0, float("nan")]]),
    )

    def refuse(*args, **kwargs):
        raise AssertionError("the watch read a tensor back at a step")

    for name in ("__bool__", "item", "__float__", "__int__", "tolist"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    for i in range(3):
        clock.train_epoch_iterations = i
        w.before_backward(step)
        w.after_eval_forward(step)
    monkeypatch.undo()
    assert int(w.losses.index) == 0 and math.isnan(float(w.losses.value))
    assert not bool(w.predictions)


def test_a_diverged_epoch_fails_naming_its_first_non_finite_iteration(host_reads):
    """Task 1, epoch 1: iteration 2's loss is inf, and the later ones NaN (the weights
    the inf loss left): the run fails at the end of that epoch, after its one read,
    naming iteration 2 and its inf loss; the second epoch never starts."""
    iterations = Iterations(poison={(0, 0, 1): float("inf")})
    with pytest.raises(UserError) as e:
        run_tiny("fp32", [iterations, watch()], epochs=EPOCHS)
    assert str(e.value).startswith(
        "tiny diverged: the training loss became inf in task 1, epoch 1 (iteration 2). "
        "The likely cause is a learning rate too large (tiny.lr = 0.01 (the card's "
        "default: 0.01))"
    )
    assert iterations.finite == [True, False, False, False]
    assert len(host_reads) == 1 and host_reads[0][:2] == [1.0, float("inf")]


def test_device_cache_reuses_a_value_until_a_source_or_the_device_changes():
    cache, made = DeviceCache(), []

    def make() -> torch.Tensor:
        made.append(1)
        return mask.clone()

    mask = torch.tensor([True, False])
    first = cache.get("m", torch.device("cpu"), (mask, 3), make)
    assert cache.get("m", torch.device("cpu"), (mask, 3), make) is first
    assert len(made) == 1
    assert cache.get("m", torch.device("cpu"), (mask, 4), make) is not first  # other value
    mask = mask.clone()  # equal, but a new object: the bookkeeping was replaced
    again = cache.get("m", torch.device("cpu"), (mask, 4), make)
    assert again is not first and torch.equal(again, first)
    assert cache.get("m", torch.device("meta"), (mask, 4), make).device.type == "meta"
    assert len(made) == 4


@pytest.mark.parametrize(
    ("method", "settings", "built"),
    [
        ("l2p", {}, {"current": 3, "unseen": 3}),
        ("finetune", {}, {"masked": 3}),
        ("mos", {"ca_epochs": 1}, {"current": 3, "old_means": 3, "seen": 3, "task_of_seen": 3}),
    ],
)
def test_masks_reach_the_device_once_per_task(method, settings, built, monkeypatch):
    """Over 3 tasks (training, then evaluation), each mask or column index is made once
    per task, and every forward of a task gets that same tensor."""
    made, handed = Counter(), {}
    real = DeviceCache.get

    def get(self, name, device, sources, make):
        def counted() -> torch.Tensor:
            made[name] += 1
            return make()

        value = real(self, name, device, sources, counted)
        handed.setdefault(name, []).append(id(value))
        return value

    monkeypatch.setattr(DeviceCache, "get", get)
    tiny = vit_backbone("vit_tiny_patch16_224", 192)
    drive(strategy(method, tiny, 4, epochs=EPOCHS, batch_size=4, **settings), small_stream())
    assert dict(made) == built
    assert sum(map(len, handed.values())) > 2 * sum(built.values())  # forwards, not tasks
    for name, ids in handed.items():
        changes = sum(a != b for a, b in zip(ids, ids[1:], strict=False))
        assert changes <= built[name] - 1, name  # one tensor per task, reused


def test_normalisation_constants_are_made_once_and_may_be_saved_for_a_backward():
    """Made first inside the frozen features' inference mode, the mean and std are
    ordinary tensors: a trained copy's forward saves them for its backward."""
    stats = (0.125, 0.25, 0.5)
    backbone = Backbone(
        name="b",
        model=torch.nn.Identity(),
        dim=3,
        input_size=4,
        kind="vit",
        weights="random",
        weights_digest="random",
        mean=stats,
        std=stats,
    )
    with torch.inference_mode():
        backbone.normalize(torch.ones(1, 3, 4, 4))
    x = torch.ones(2, 3, 4, 4, requires_grad=True)
    backbone.normalize(x).sum().backward()
    assert x.grad[0, :, 0, 0].tolist() == [8.0, 4.0, 2.0]
    cpu = torch.device("cpu")
    assert channel_stats(stats, cpu, torch.float32) is channel_stats(stats, cpu, torch.float32)
