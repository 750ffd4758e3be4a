"""The options of ``cl-bench run`` that say what runs and where (``Annotated`` types for the
command's signature, :mod:`cl_bench.commands.run`), in the panels of its help."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cl_bench.commands.shared import OUTPUT, SWITCH, cards_option

# The panels of `run --help`, shown in this order after the Options panel (which Typer
# shows first, with --help): a panel comes where the signature first names it. Each panel
# is a table of its own, its columns as wide as its own options' names need.
RUN_WHAT = "What to run"
RUN_MODEL = "Model and data"
RUN_HARDWARE = "Hardware"

Cards = Annotated[list[str] | None, cards_option(RUN_WHAT)]

Methods = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=RUN_WHAT,
        help="Comma-separated methods (see `cl-bench list methods`). Default: every method "
        "of the default set that runs on the backbone.",
    ),
]

Scenario = Annotated[
    str,
    typer.Option(
        "--scenario",
        "--scenarios",
        rich_help_panel=RUN_WHAT,
        help="Scenario, or comma-separated scenarios (see `cl-bench list scenarios`).",
    ),
]

Seeds = Annotated[
    str,
    typer.Option(
        rich_help_panel=RUN_WHAT,
        help="Comma-separated seeds; the seed also fixes the class order (PILOT convention).",
    ),
]

Protocol = Annotated[
    str,
    typer.Option(
        rich_help_panel=RUN_WHAT,
        help="fair: every card's defaults (per-image choices, shuffled test batches); "
        "paper: each method's published protocol (its card's paper: block). --set "
        "wins over both. Recorded in every result.",
    ),
]

Sets = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        rich_help_panel=RUN_WHAT,
        help="Override a setting: method.key=value or scenario.key=value, e.g. --set "
        "tosca.selection=batch --set scenario.increment=5. Repeatable. Comma-separated "
        "values sweep: --set tosca.lr=0.01,0.05 runs each (commas inside [ ], { } or "
        "quotes do not split).",
    ),
]

Validation = Annotated[
    float,
    typer.Option(
        rich_help_panel=RUN_WHAT,
        help="Hold out this share of each class's training images (seeded, the same "
        "images for every seed) and evaluate on them instead of the test set, e.g. 0.1: "
        "for choosing settings without looking at test accuracy (`cl-bench tune` does). "
        "0: the test set. Recorded in every result.",
    ),
]

DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        rich_help_panel=RUN_WHAT,
        metavar=SWITCH,
        help="Print the plan (every run's settings, result path, done, stale or pending) "
        "and exit, without loading weights or training (the data is read, not "
        "decoded: result paths name it).",
    ),
]

Backbone = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=RUN_MODEL,
        help="Backbone (see `cl-bench list backbones`). Default: the scenario's, the "
        "paper's ViT-B/16 (ImageNet-21k) on the paper scenarios, EfficientNet-Lite0 on "
        "the embedded ones.",
    ),
]

Weights = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=RUN_MODEL,
        help="Backbone weights: omit for the pinned pretrained weights (or the scenario's), "
        "a local .safetensors/.pth/.npz file, or 'random' (smoke tests only).",
    ),
]

ImageSize = Annotated[
    int | None,
    typer.Option(
        rich_help_panel=RUN_MODEL,
        help="Input resolution in pixels, for every backbone (default: the backbone's, "
        "224); a ViT needs a multiple of its patch size (e.g. 32 for a fast "
        "random-weight test).",
    ),
]

DataRoot = Annotated[
    Path | None,
    typer.Option(
        envvar="CL_BENCH_DATA",
        rich_help_panel=RUN_MODEL,
        help="Folder with the scenario's data (env CL_BENCH_DATA).",
    ),
]

Download = Annotated[
    bool,
    typer.Option(
        rich_help_panel=RUN_MODEL,
        metavar=SWITCH,
        help="Allow downloading a dataset that torchvision can fetch (CIFAR-100) into "
        "--data-root; nothing is ever downloaded without it.",
    ),
]

Device = Annotated[
    str,
    typer.Option(
        rich_help_panel=RUN_HARDWARE,
        help="auto (a GPU torch can use, else the CPU; a GPU present but unusable is an "
        "error, never a silent CPU run) | cpu | cuda | cuda:K (GPU K). The device kind "
        "and GPU architecture are part of every result's key.",
    ),
]

Precision = Annotated[
    str,
    typer.Option(
        rich_help_panel=RUN_HARDWARE,
        help="Backbone passes: auto (bf16 where the hardware has bf16 matrix units; fp16 "
        "with loss scaling on an older GPU; else fp32) | fp32 | bf16 | fp16. Recorded "
        "in every result.",
    ),
]

Deterministic = Annotated[
    str,
    typer.Option(
        rich_help_panel=RUN_HARDWARE,
        help="strict: bitwise-repeatable on a GPU (deterministic kernels, cuBLAS workspace, "
        "math attention) | fast: the fastest kernels, last digits may vary. The CPU is "
        "deterministic either way. Recorded in every result.",
    ),
]

Out = Annotated[
    Path,
    typer.Option(rich_help_panel=OUTPUT, help="Results folder; finished runs are skipped."),
]

Progress = Annotated[
    bool, typer.Option(rich_help_panel=OUTPUT, metavar=SWITCH, help="Show progress bars.")
]

Log = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=OUTPUT,
        help="Send each run's per-task metrics, final numbers and configuration to "
        "trackers, comma-separated: csv | tensorboard | wandb (offline unless WANDB_MODE "
        "says otherwise) | mlflow (a file store unless MLFLOW_TRACKING_URI is set); into "
        "<out>/logs/.",
    ),
]
