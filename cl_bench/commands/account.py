"""``cl-bench account``: parameters and FLOPs per method, without data or training."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cl_bench import api
from cl_bench.commands.shared import OUTPUT, SWITCH, cards_option, user_errors, with_cards

ACCOUNT_WHAT = "What to count"
ACCOUNT_MODEL = "Model"
ACCOUNT_HOW = "How to count"


@user_errors
@with_cards
def account(
    methods: Annotated[
        str, typer.Option(rich_help_panel=ACCOUNT_WHAT, help="Comma-separated methods.")
    ] = "tosca,simplecil",
    tasks: Annotated[
        int, typer.Option(rich_help_panel=ACCOUNT_WHAT, help="Number of tasks T.")
    ] = 10,
    classes: Annotated[
        int,
        typer.Option(
            rich_help_panel=ACCOUNT_WHAT,
            help="Number of classes C: C/T per task; when T does not divide C the first task "
            "takes the rest, as a scenario does (10 in 3 tasks: 4, 3, 3).",
        ),
    ] = 200,
    cards: Annotated[list[str] | None, cards_option(ACCOUNT_WHAT)] = None,
    backbone: Annotated[
        str,
        typer.Option(
            rich_help_panel=ACCOUNT_MODEL, help="Backbone (see `cl-bench list backbones`)."
        ),
    ] = "vit_base_patch16_224",
    weights: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=ACCOUNT_MODEL,
            help="Backbone weights; default random (counts do not depend on values).",
        ),
    ] = None,
    image_size: Annotated[
        int | None, typer.Option(rich_help_panel=ACCOUNT_MODEL, help="ViT input resolution.")
    ] = None,
    every_task: Annotated[
        bool,
        typer.Option(
            "--every-task",
            rich_help_panel=ACCOUNT_HOW,
            metavar=SWITCH,
            help="Run every task, also for a method whose tasks repeat (by default its "
            "first tasks run and the counts are carried exactly to the last one).",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", rich_help_panel=OUTPUT, metavar=SWITCH, help="Print JSON instead of a table."
        ),
    ] = False,
    progress: Annotated[
        bool,
        typer.Option(
            rich_help_panel=OUTPUT,
            metavar=SWITCH,
            help="Show each method's progress through the tasks (on stderr).",
        ),
    ] = True,
) -> None:
    """Count parameters and FLOPs per method at the end of a T-task stream, without data
    or training.

    Per method: trainable, added per task and stored parameters (everything kept beyond the
    backbone), inference GFLOPs per image (every backbone pass, attention included) and
    training GFLOPs per sample. The counts do not depend on the weights' values, so random
    weights serve by default. Where a method declares that its tasks repeat, its first tasks
    run and each count is carried exactly to the last task ("run" column; --every-task runs
    them all).

    Examples:
      cl-bench account --methods tosca,l2p --tasks 10 --classes 200
      cl-bench account --methods tosca,mos --tasks 300 --classes 300
      cl-bench account --backbone vit_small_patch16_224 --json
    """
    rows = api.account(
        methods,
        tasks=tasks,
        classes=classes,
        backbone=backbone,
        weights=weights,
        image_size=image_size,
        progress=progress,
        every_task=every_task,
    )
    typer.echo(json.dumps(rows, indent=1) if as_json else api.account_table(rows))
