"""``cl-bench account``: parameters and FLOPs of methods at the end of a stream,
without data or training.

Each method is driven through tasks of placeholder data (one random sample per
class) with batch 1 and one pass of every loop a card sets in epochs (``epochs``
and every ``*_epochs``: MiN's first-task training and least-squares fit, MOS's and
TUNA's classifier alignment), so that every module, prompt, head row and plugin
state exists exactly as after a real run; counts do not depend on weight values,
data or the number of passes (training FLOPs are those of the first step).

Nothing is computed that a count does not need: the backbone is built without
initialising its weights (zeros), and everything runs inside
:func:`~cl_bench.accounting.shapes_only.shapes_only`, where matrix products,
attention and linear algebra return zeros of their real shapes while the FLOP
counter counts them as the real ones.

A placeholder experience must hold every class of its task, as a real one does:
methods size what they build from the classes an experience holds (EASE's proxy,
MOS's initial-guess prototypes), and one sample per task once gave them one class.

A long stream is not run to its end where the method declares that its tasks repeat
(:meth:`~cl_bench.contract.Method.repeats_after`): the first tasks run, each count
is followed task by task (inference FLOPs after every task that ran too), and
:mod:`cl_bench.accounting.extend` carries the counts exactly to the last task (under
the settings :meth:`~cl_bench.contract.Method.account_settings` names, where a setting
switches inference at a fixed task). A row
carries the fields of a run's ``accounting`` record
(:func:`~cl_bench.accounting.block.accounting_fields`, which the runner uses too) and
``tasks_run``; tests/integration/test_account_matches_run.py holds them equal to a
run's for every built-in card, and tests/integration/test_account_long.py the
extended counts equal to those of every task run.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

from cl_bench.accounting.block import accounting_fields
from cl_bench.accounting.count import TrainFlops, backbone_flops, inference_flops
from cl_bench.accounting.extend import extend, tasks_to_run
from cl_bench.accounting.heap import heap_kept
from cl_bench.accounting.shapes_only import shapes_only
from cl_bench.backbones import load_backbone
from cl_bench.backbones.base import Backbone
from cl_bench.cards.catalogue import load_method
from cl_bench.cards.resolve import resolve_for_backbone
from cl_bench.cards.strategy import strategy_of
from cl_bench.contract import (
    AdaptedStream,
    Inputs,
    Schedule,
    check_backbone,
    drive,
    spec_of,
)
from cl_bench.engine.environment import threads
from cl_bench.engine.recording import Recorder
from cl_bench.errors import UserError
from cl_bench.scenarios.order import split_in_tasks
from cl_bench.scenarios.stream import Stream, build_stream
from cl_bench.text_table import text_table

CHUNK = 32  # placeholder images per frozen pass of an adapted method's features


def one_pass(params: dict) -> dict:
    """Every setting that counts passes (``epochs``, ``*_epochs``) at one pass."""
    return {k: 1 for k in params if k == "epochs" or k.endswith("_epochs")}


@dataclass
class Counts:
    """Per task (tasks 1 .. len): parameters trained (at the task's start) and stored
    (at its end), FLOPs per sample of its first training step (None: no step), and
    inference FLOPs per image after it (every task when followed, else the last)."""

    trainable: list[int] = field(default_factory=list)
    stored: list[int] = field(default_factory=list)
    train: list[float | None] = field(default_factory=list)
    inference: list[int] = field(default_factory=list)

    def extended(self, repeats_after: int, n_tasks: int) -> Counts | None:
        """Carried to ``n_tasks`` tasks (:func:`~cl_bench.accounting.extend.extend`);
        None when a count does not repeat as declared."""
        out = [
            extend(v, repeats_after, n_tasks)
            for v in (self.trainable, self.stored, self.train, self.inference)
        ]
        return None if any(v is None for v in out) else Counts(*out)


def placeholder_stream(
    backbone: Backbone, features_only: bool, sizes: list[int]
) -> tuple[torch.Tensor, torch.Tensor, Stream]:
    """(inputs, labels, stream): one random sample per class of the tasks ``sizes``,
    and no test images (account evaluates nothing)."""
    y = torch.arange(sum(sizes))
    g = torch.Generator().manual_seed(0)
    if features_only:
        x = torch.randn(len(y), backbone.dim, generator=g)
    else:
        x = torch.rand(len(y), 3, backbone.input_size, backbone.input_size, generator=g)
    stream = build_stream(
        x, y, x[:0], y[:0], list(range(len(y))), sizes, test_shuffle=False, seed=0
    )
    return x, y, stream


def count_tasks(
    name: str, params: dict, backbone: Backbone, sizes: list[int], n_classes: int, **how
) -> Counts:
    """Drive method ``name`` (its resolved ``params``) through the tasks ``sizes`` of a
    stream of ``n_classes`` classes and count as it goes. ``how``: ``follow`` (count
    inference after every task, not only the last), ``of`` (the stream's number of
    tasks, for the progress label) and ``progress``."""
    cls = strategy_of(load_method(name))
    spec = spec_of(cls)
    x, y, stream = placeholder_stream(backbone, spec.inputs is Inputs.FEATURES, sizes)
    task_of_label = stream.task_of_label
    if spec.inputs is Inputs.ADAPTED_FEATURES:

        def features(backbones: list) -> Stream:
            f = torch.cat(
                [torch.cat([b.features(c) for c in x.split(CHUNK)]) for b in backbones], dim=1
            )
            return build_stream(
                f, y, f[:0], y[:0], list(range(len(y))), sizes, test_shuffle=False, seed=0
            )

        stream = AdaptedStream(stream, backbone, features)
    of = how.get("of", len(sizes))
    label = f"counting {name}" + (f" ({len(sizes)} of {of} tasks run)" if of > len(sizes) else "")
    recorder = Recorder(task_of_label, backbone, label=label, progress=how.get("progress", False))
    meter = TrainFlops(stop_after_first=True)
    from cl_bench.engine.runner import quiet_evaluator

    strategy = cls(
        params=params,
        backbone=backbone,
        n_classes=n_classes,
        device=torch.device("cpu"),
        plugins=[recorder, meter],
        evaluator=quiet_evaluator(),
    )
    counts = Counts()
    passes: dict[int, tuple[Backbone, int]] = {}

    def pass_flops(b: Backbone) -> int:
        """A backbone's frozen pass, counted once per backbone (kept alive with it)."""
        if id(b) not in passes:
            passes[id(b)] = (b, backbone_flops(b))
        return passes[id(b)][1]

    steps = [0]  # training steps counted before the task

    def after_task(done: int) -> None:
        new = meter.per_sample[steps[0] :]
        steps[0] = len(meter.per_sample)
        counts.train.append(max(new) if new else None)
        if how.get("follow") or done == len(sizes):
            counts.inference.append(inference_flops(strategy, backbone, pass_flops))

    drive(strategy, stream, evaluate=False, after_task=after_task)
    if spec.schedule is Schedule.JOINT:  # one training, no after_task
        counts.train = list(meter.per_sample)
        counts.inference = [inference_flops(strategy, backbone, pass_flops)]
    counts.trainable, counts.stored = list(recorder.trainable), list(recorder.stored)
    return counts


def carried_counts(
    name: str,
    cls: type,
    params: dict,
    backbone: Backbone,
    sizes: list[int],
    n_classes: int,
    every_task: bool,
    progress: bool,
) -> tuple[Counts, int]:
    """The counts of every task of the stream ``sizes`` under ``params`` and the tasks
    run for them: the first tasks and the rest carried where the method declares that
    its tasks repeat (and they do), else every one."""
    n_tasks = len(sizes)
    declared = None
    if not every_task and spec_of(cls).schedule is Schedule.PER_TASK:
        declared = getattr(cls, "repeats_after", lambda *_: None)(params, n_tasks)
    run = tasks_to_run(declared, n_tasks)

    def count(k: int, follow: bool) -> Counts:
        return count_tasks(
            name, params, backbone, sizes[:k], n_classes, follow=follow, of=n_tasks,
            progress=progress,
        )  # fmt: skip

    if run == n_tasks:
        return count(n_tasks, False), run
    extended = count(run, True).extended(declared, n_tasks)
    if extended is None:  # the counts do not repeat as declared: run every task
        return count(n_tasks, False), n_tasks
    return extended, run


def account_method(
    name: str,
    backbone: Backbone,
    n_tasks: int,
    n_classes: int,
    progress: bool = False,
    every_task: bool = False,
) -> dict:
    """The row of method ``name`` (module docstring); ``every_task``: run every task
    even where the method declares that its tasks repeat."""
    card = load_method(name)
    cls = strategy_of(card)
    check_backbone(cls, name, backbone.name, backbone.kind)
    resolve_for_backbone(card, backbone)
    params = dict(card.params, **one_pass(card.params), batch_size=1)
    sizes = split_in_tasks(n_classes, n_tasks)
    if params.get("n_tasks") == 0:
        params["n_tasks"] = len(sizes)
    if not every_task and spec_of(cls).schedule is Schedule.PER_TASK:
        params.update(getattr(cls, "account_settings", lambda *_: {})(params, n_tasks))
    with shapes_only():
        counts, run = carried_counts(
            name, cls, params, backbone, sizes, n_classes, every_task, progress
        )
        pass_flops = backbone_flops(backbone)
    block = accounting_fields(
        backbone.model,
        counts.trainable,
        counts.stored,
        pass_flops,
        counts.inference[-1],
        [v for v in counts.train if v is not None],
    )
    return {
        "method": name,
        "backbone": backbone.name,
        "tasks": len(sizes),
        "classes": n_classes,
        **block,
        "trainable_last_task": counts.trainable[-1],
        "inference_backbone_passes": (
            block["inference_gflops_per_image"] / block["backbone_gflops_per_pass"]
        ),
        "tasks_run": run,
    }


def counting_backbone(name: str, weights: str | None, image_size: int | None) -> Backbone:
    """The backbone to count with: with random weights (the default), built on the
    ``meta`` device and materialised as zeros: no count reads a weight's value, and
    timm's initialisation is most of the time it takes to build."""
    if weights not in (None, "random"):
        return load_backbone(name, weights, image_size)
    with torch.device("meta"):
        backbone = load_backbone(name, "random", image_size)
    backbone.model.to_empty(device="cpu")
    with torch.no_grad():
        for t in itertools.chain(backbone.model.parameters(), backbone.model.buffers()):
            t.zero_()
    return backbone


def account(
    methods: list[str],
    backbone_name: str,
    weights: str | None,
    n_tasks: int,
    n_classes: int,
    image_size: int | None = None,
    progress: bool = False,
    every_task: bool = False,
) -> list[dict]:
    if n_tasks < 1 or n_classes < n_tasks:
        raise UserError(
            f"--tasks {n_tasks} and --classes {n_classes}: need at least one task "
            "and at least as many classes as tasks."
        )
    # one thread: counting runs no arithmetic worth a second one, and two OpenMP threads
    # spin-wait for each other whenever another job holds a core
    with heap_kept(), threads(1):
        backbone = counting_backbone(backbone_name, weights, image_size)
        return [
            account_method(m, backbone, n_tasks, n_classes, progress, every_task) for m in methods
        ]


def account_table(rows: list[dict]) -> str:
    head = (
        "method",
        "trainable",
        "added task 1",
        "added later",
        "stored@end",
        "inf GFLOPs",
        "passes",
        "train GFLOPs/sample",
        "run",
    )
    body = [
        (
            r["method"],
            f"{r['trainable_last_task']:,}",
            f"{r['added_per_task'][0]:,}",
            f"{r['added_per_task'][-1]:,}",
            f"{r['stored_at_end']:,}",
            f"{r['inference_gflops_per_image']:.3f}",
            f"{r['inference_backbone_passes']:.3f}",
            f"{r['train_gflops_per_sample']:.3f}",
            f"{r['tasks_run']}/{r['tasks']}",
        )
        for r in rows
    ]
    lines = text_table([head, *body], right=range(1, len(head)))
    r0 = rows[0] if rows else None
    title = (
        f"{r0['backbone']}: {r0['backbone_params']:,} parameters, "
        f"{r0['backbone_gflops_per_pass']:.2f} GFLOPs per pass; {r0['tasks']} tasks, "
        f"{r0['classes']} classes"
        if r0
        else ""
    )
    return title + "\n" + "\n".join(lines)
