"""``cl-bench account``: parameters and FLOPs of methods at the end of a stream,
without data or training.

Each method is driven through T tasks of placeholder data (one random sample
per class) with batch 1 and one pass of every loop a card sets in epochs
(``epochs`` and every ``*_epochs``: MiN's first-task training and least-squares
fit, MOS's and TUNA's classifier alignment), so that every module, prompt, head
row and plugin state exists exactly as after a real run; counts do not depend on
weight values, data or the number of passes (training FLOPs are those of the
first step), so random backbone weights and single passes are fine.

A placeholder experience must hold every class of its task, as a real one does:
methods size what they build from the classes an experience holds (EASE's proxy,
MOS's initial-guess prototypes), and one sample per task once gave them one class.
The price is that passes over a task's data (prototypes, EWC's importances) read
C/T images instead of one. A row carries the fields of a run's ``accounting``
record, computed by the same :func:`~cl_bench.engine.runner.accounting_block`;
tests/integration/test_account_matches_run.py holds the two equal for every built-in card.
"""

from __future__ import annotations

import torch

from cl_bench.accounting.count import TrainFlops
from cl_bench.backbones import load_backbone
from cl_bench.cards.catalogue import load_method
from cl_bench.cards.resolve import resolve_for_backbone
from cl_bench.cards.strategy import strategy_of
from cl_bench.contract import AdaptedStream, Inputs, check_backbone, drive, spec_of
from cl_bench.engine.recording import Recorder
from cl_bench.errors import UserError
from cl_bench.scenarios.order import split_in_tasks
from cl_bench.scenarios.stream import Stream, build_stream
from cl_bench.text_table import text_table


def one_pass(params: dict) -> dict:
    """Every setting that counts passes (``epochs``, ``*_epochs``) at one pass."""
    return {k: 1 for k in params if k == "epochs" or k.endswith("_epochs")}


def account_method(
    name: str, backbone, n_tasks: int, n_classes: int, progress: bool = False
) -> dict:
    card = load_method(name)
    cls = strategy_of(card)
    check_backbone(cls, name, backbone.name, backbone.kind)
    resolve_for_backbone(card, backbone)
    params = dict(card.params, **one_pass(card.params), batch_size=1)
    features_only = spec_of(cls).inputs is Inputs.FEATURES
    sizes = split_in_tasks(n_classes, n_tasks)
    y = torch.arange(sum(sizes))  # one sample per class (module docstring)
    g = torch.Generator().manual_seed(0)
    if features_only:
        x = torch.randn(len(y), backbone.dim, generator=g)
    else:
        x = torch.rand(len(y), 3, backbone.input_size, backbone.input_size, generator=g)
    stream = build_stream(x, y, x, y, list(range(n_classes)), sizes, test_shuffle=False, seed=0)
    task_of_label = stream.task_of_label
    if spec_of(cls).inputs is Inputs.ADAPTED_FEATURES:

        def features(backbones: list) -> Stream:
            f = torch.cat([b.features(x) for b in backbones], dim=1)
            return build_stream(
                f, y, f, y, list(range(n_classes)), sizes, test_shuffle=False, seed=0
            )

        stream = AdaptedStream(stream, backbone, features)
    if params.get("n_tasks") == 0:
        params["n_tasks"] = len(sizes)
    recorder = Recorder(task_of_label, backbone, label=f"counting {name}", progress=progress)
    meter = TrainFlops(stop_after_first=True)
    from cl_bench.engine.runner import accounting_block, quiet_evaluator

    strategy = cls(
        params=params,
        backbone=backbone,
        n_classes=n_classes,
        device=torch.device("cpu"),
        plugins=[recorder, meter],
        evaluator=quiet_evaluator(),
    )
    drive(strategy, stream, evaluate=False)
    block = accounting_block(strategy, backbone, recorder, meter)
    return {
        "method": name,
        "backbone": backbone.name,
        "tasks": len(sizes),
        "classes": n_classes,
        **block,
        "trainable_last_task": recorder.trainable[-1],
        "inference_backbone_passes": (
            block["inference_gflops_per_image"] / block["backbone_gflops_per_pass"]
        ),
    }


def account(
    methods: list[str],
    backbone_name: str,
    weights: str | None,
    n_tasks: int,
    n_classes: int,
    image_size: int | None = None,
    progress: bool = False,
) -> list[dict]:
    if n_tasks < 1 or n_classes < n_tasks:
        raise UserError(
            f"--tasks {n_tasks} and --classes {n_classes}: need at least one task "
            "and at least as many classes as tasks."
        )
    backbone = load_backbone(backbone_name, weights or "random", image_size)
    return [account_method(m, backbone, n_tasks, n_classes, progress) for m in methods]


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
