"""The method contract (cl_bench.contract): every shipped strategy declares it, a
strategy that declares nothing is refused before anything runs, and ``drive`` is the
one loop that runs a strategy over a stream."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from avalanche.training.supervised import Naive

from cl_bench.cards.catalogue import load_method, method_names
from cl_bench.cards.strategy import import_object
from cl_bench.contract import (
    AUGMENT_VIEWS,
    EVAL_BATCH_SIZE,
    Inputs,
    Method,
    MethodSpec,
    ProtocolSetting,
    Schedule,
    drive,
    spec_of,
)
from cl_bench.errors import UserError
from cl_bench.strategies.blocks.luca import SELECTION
from cl_bench.strategies.blocks.prompt_matching import BATCHWISE
from tests.helpers.cli import ADVICE

NAIVE = "avalanche.training.supervised.strategy_wrappers:Naive"
SHIPPED = {
    "tosca": (Inputs.FEATURES, False, Schedule.PER_TASK),
    "simplecil": (Inputs.FEATURES, False, Schedule.PER_TASK),
    "l2p": (Inputs.IMAGES_WITH_QUERY, False, Schedule.PER_TASK),
    "dualprompt": (Inputs.IMAGES_WITH_QUERY, False, Schedule.PER_TASK),
    "coda-prompt": (Inputs.IMAGES_WITH_QUERY, False, Schedule.PER_TASK),
    "finetune": (Inputs.IMAGES, True, Schedule.PER_TASK),
    "ewc": (Inputs.IMAGES, True, Schedule.PER_TASK),
    "joint": (Inputs.IMAGES, True, Schedule.JOINT),
    "ranpac": (Inputs.ADAPTED_FEATURES, True, Schedule.PER_TASK),
    "aper": (Inputs.ADAPTED_FEATURES, True, Schedule.PER_TASK),
    "ease": (Inputs.IMAGES, False, Schedule.PER_TASK),
    "mos": (Inputs.IMAGES, False, Schedule.PER_TASK),
    "tuna": (Inputs.IMAGES, False, Schedule.PER_TASK),
    "min": (Inputs.IMAGES, False, Schedule.PER_TASK),
    "lca": (Inputs.IMAGES, False, Schedule.PER_TASK),
    "care": (Inputs.IMAGES, False, Schedule.PER_TASK),
    "sldc": (Inputs.IMAGES, False, Schedule.PER_TASK),
}
# the protocol settings each declares, in order (the others: eval_batch_size only)
PROTOCOL = {
    "tosca": ["selection", "augment_views", "eval_batch_size"],
    "l2p": ["batchwise", "eval_batch_size"],
    "dualprompt": ["batchwise", "eval_batch_size"],
}


def test_every_shipped_strategy_declares_its_contract():
    assert sorted(method_names()) == sorted(SHIPPED)
    for name, (inputs, trains_backbone, schedule) in SHIPPED.items():
        cls = import_object(load_method(name).raw["strategy"])
        assert issubclass(cls, Method)
        assert spec_of(cls) == MethodSpec(
            inputs=inputs,
            trains_backbone=trains_backbone,
            schedule=schedule,
            protocol=spec_of(cls).protocol,
        )
        assert [s.key for s in spec_of(cls).protocol] == PROTOCOL.get(name, ["eval_batch_size"])


def test_every_declared_protocol_setting_is_a_setting_of_the_card():
    """A declared protocol setting is recorded from the card: every shipped card has it,
    with a value its label can name."""
    for name in SHIPPED:
        card = load_method(name)
        for setting in spec_of(import_object(card.raw["strategy"])).protocol:
            assert setting.key in card.params, (name, setting.key)
            assert setting.label is None or setting.shown(card.params[setting.key]), name


def test_a_protocol_setting_names_its_values_and_its_per_batch_rules():
    assert SELECTION.shown("batch") == "selection=batch" and SELECTION.is_per_batch("batch")
    assert not SELECTION.is_per_batch("sample")
    assert (BATCHWISE.shown(True), BATCHWISE.shown(False)) == ("batchwise", "per-image prompts")
    assert BATCHWISE.is_per_batch(True) and not BATCHWISE.is_per_batch(1)
    assert EVAL_BATCH_SIZE.shown(48) == "batches of 48" and EVAL_BATCH_SIZE.batch_size
    assert AUGMENT_VIEWS.shown(2) is None and EVAL_BATCH_SIZE.shown(None) is None
    with pytest.raises(TypeError, match="one-line meaning"):
        ProtocolSetting("k", "two\nlines")
    with pytest.raises(TypeError, match="distinct keys"):
        MethodSpec(
            inputs=Inputs.FEATURES,
            trains_backbone=False,
            schedule=Schedule.PER_TASK,
            protocol=(EVAL_BATCH_SIZE, EVAL_BATCH_SIZE),
        )


def test_a_bare_avalanche_template_is_refused_with_one_message():
    with pytest.raises(UserError) as e:
        spec_of(Naive)
    assert str(e.value) == f"strategy {NAIVE} {ADVICE}"


@pytest.mark.parametrize("spec", ["missing", "features"])
def test_a_method_without_a_valid_spec_is_refused(spec):
    body = {} if spec == "missing" else {"spec": spec}
    cls = type("Half", (Method,), body)
    with pytest.raises(UserError) as e:
        spec_of(cls)
    assert str(e.value) == f"strategy {__name__}:Half {ADVICE}"


def test_a_spec_takes_only_its_declared_kinds():
    with pytest.raises(TypeError, match="MethodSpec takes an Inputs, a bool and a Schedule"):
        MethodSpec(inputs="features", trains_backbone=False, schedule=Schedule.PER_TASK)


class Fake(Method):
    """Records the calls ``drive`` makes."""

    spec = MethodSpec(inputs=Inputs.FEATURES, trains_backbone=False, schedule=Schedule.PER_TASK)

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def train(self, experiences, eval_streams, **loader_args) -> None:
        assert eval_streams == []
        self.calls.append(("train", experiences, loader_args))

    def eval(self, experience, **loader_args) -> None:
        self.calls.append(("eval", experience, loader_args))


class FakeJoint(Fake):
    spec = MethodSpec(inputs=Inputs.IMAGES, trains_backbone=True, schedule=Schedule.JOINT)


STREAM = SimpleNamespace(train=["t0", "t1", "t2"], seen_test=["s0", "s1", "s2"])


def test_drive_per_task_trains_then_evaluates_each_task_and_reports_it():
    fake, done = Fake(), []
    drive(
        fake,
        STREAM,
        after_task=lambda n: done.append((n, len(fake.calls))),
        loader_args={"num_workers": 2},
    )
    w = {"num_workers": 2}
    assert fake.calls == [
        ("train", "t0", w),
        ("eval", "s0", w),
        ("train", "t1", w),
        ("eval", "s1", w),
        ("train", "t2", w),
        ("eval", "s2", w),
    ]
    assert done == [(1, 2), (2, 4), (3, 6)]


def test_drive_gives_evaluation_its_own_loader_arguments():
    """Training reads files through a worker; evaluation, of test images held in
    memory, gets its own arguments (no worker)."""
    fake = Fake()
    train, test = {"num_workers": 1}, {"num_workers": 0}
    drive(fake, STREAM, loader_args=train, eval_args=test)
    assert fake.calls == [
        ("train", "t0", train),
        ("eval", "s0", test),
        ("train", "t1", train),
        ("eval", "s1", test),
        ("train", "t2", train),
        ("eval", "s2", test),
    ]
    joint = FakeJoint()
    drive(joint, STREAM, loader_args=train, eval_args=test)
    assert [c[2] for c in joint.calls] == [train, test, test, test]


def test_drive_resumes_after_the_tasks_a_checkpoint_holds():
    fake, done = Fake(), []
    drive(fake, STREAM, start=2, after_task=done.append)
    assert fake.calls == [("train", "t2", {}), ("eval", "s2", {})]
    assert done == [3]


def test_drive_without_evaluation_only_trains():
    fake = Fake()
    drive(fake, STREAM, evaluate=False)
    assert fake.calls == [("train", "t0", {}), ("train", "t1", {}), ("train", "t2", {})]


def test_drive_joint_trains_once_on_every_task_then_evaluates_each():
    fake, done = FakeJoint(), []
    drive(fake, STREAM, after_task=done.append)
    assert fake.calls == [
        ("train", ["t0", "t1", "t2"], {}),
        ("eval", "s0", {}),
        ("eval", "s1", {}),
        ("eval", "s2", {}),
    ]
    assert done == []
    with pytest.raises(ValueError, match="cannot start at task 1"):
        drive(FakeJoint(), STREAM, start=1)


def test_drive_refuses_a_strategy_that_declares_nothing():
    with pytest.raises(UserError, match="declares no method contract"):
        drive(SimpleNamespace(), STREAM)


def test_method_hooks_default_to_nothing_checked_and_no_routing():
    assert Fake.check_params({"lr": 0.1}, None) is None
    assert Fake().routing() is None


def test_make_optimizer_takes_parameters_or_groups_not_a_mix():
    """Loose parameters and parameter groups each give one optimizer (frozen parameters
    left out); a mix of both is refused, naming the fix."""
    import torch
    from torch import nn

    from cl_bench.contract.optimizer import make_optimizer

    frozen, free = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.ones(3))
    frozen.requires_grad_(False)
    params = {"optimizer": "sgd", "lr": 0.1, "epochs": 1}
    opt, sched = make_optimizer(params, [frozen, free])
    assert [len(g["params"]) for g in opt.param_groups] == [1] and sched is None
    opt, _ = make_optimizer(params, [{"params": [frozen, free], "lr": 0.5}])
    assert [(len(g["params"]), g["lr"]) for g in opt.param_groups] == [(1, 0.5)]
    with pytest.raises(TypeError, match="not a mix of both"):
        make_optimizer(params, [free, {"params": [frozen]}])


def test_text_arguments_take_paths_as_strings():
    """A path argument (weights) may be a str or any path object, bytes ones included,
    and comes back as a str."""
    from pathlib import Path

    from cl_bench import arguments

    class BytesPath:
        def __fspath__(self) -> bytes:
            return b"/tmp/w.pth"

    for value in ("/tmp/w.pth", Path("/tmp/w.pth"), BytesPath()):
        assert arguments.text("weights", value, 'weights="random"', path=True) == "/tmp/w.pth"
