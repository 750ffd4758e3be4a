"""``cl-bench tune``: a method's settings searched on a validation split, never the test set."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cl_bench import api
from cl_bench.commands import grid_options as G
from cl_bench.commands import run_options as R
from cl_bench.commands.run import seed_list
from cl_bench.commands.shared import user_errors, with_cards

SEARCH = "Search"

Method = Annotated[str, typer.Option(rich_help_panel=SEARCH, help="The method to tune (one).")]
Space = Annotated[
    list[str] | None,
    typer.Option(
        rich_help_panel=SEARCH,
        help="A searched setting, replacing the card's search: entry for it: "
        "method.key=LOW..HIGH (add :log for a log scale; whole numbers when the setting "
        "is whole) or method.key=a|b|c. Repeatable. Default: the card's search: block.",
    ),
]
Trials = Annotated[
    int, typer.Option(rich_help_panel=SEARCH, help="Finished trials wanted (resumes to it).")
]
Objective = Annotated[
    str,
    typer.Option(
        rich_help_panel=SEARCH,
        help="avg (average accuracy over tasks) | last (after the last task), on the "
        "validation split, the mean over --seeds.",
    ),
]
Validation = Annotated[
    float,
    typer.Option(
        rich_help_panel=SEARCH,
        help="Share of each class's training images held out and scored on (seeded, the "
        "same images in every trial); the test split is never read.",
    ),
]
Out = Annotated[
    Path,
    typer.Option(
        "--results",
        rich_help_panel=SEARCH,
        help="Where searches live: <results>/<scenario>/<method>/<study>/ holds the study's "
        "journal, its trial runs and tune.json (trials, best, cost).",
    ),
]


@user_errors
@with_cards
def tune(
    method: Method,
    scenario: str = typer.Option("fmnist", rich_help_panel=SEARCH, help="The scenario searched."),
    seeds: R.Seeds = "1993",
    trials: Trials = 20,
    space: Space = None,
    objective: Objective = "avg",
    validation: Validation = 0.1,
    out: Out = api.TUNE_OUT,
    sets: R.Sets = None,
    cards: R.Cards = None,
    backbone: R.Backbone = None,
    weights: R.Weights = None,
    image_size: R.ImageSize = None,
    data_root: R.DataRoot = None,
    device: R.Device = "auto",
    precision: R.Precision = "auto",
    protocol: R.Protocol = "fair",
    progress: R.Progress = True,
    launcher: G.Launcher = None,
    jobs: G.Jobs = None,
    slurm_partition: G.SlurmPartition = None,
    slurm_gpus: G.SlurmGpus = None,
    slurm_cpus: G.SlurmCpus = None,
    slurm_time: G.SlurmTime = None,
    slurm_array_parallelism: G.SlurmArrayParallelism = None,
) -> None:
    """Search a method's settings with Optuna on a validation split, never the test set.

    Each trial runs the method once per seed, training on the training images left after
    a seeded, stratified share of each class is held out, and is scored on that share.
    Trials run one after another here, or --jobs at once with --launcher local, or as a
    SLURM job array. Interrupted, the same command resumes: finished trials are kept and
    their runs read back. The study's record, tune.json, lists every trial, the best
    settings and the search's cost; `cl-bench run --tuned` runs the best settings on the
    test set, and `--tuned-on SCENARIO` takes them from a search on another scenario
    (tune on one scenario, evaluate on another).

    Examples:
      cl-bench tune --method tosca --scenario synthetic --trials 20
      cl-bench tune --method tosca --scenario synthetic \\
          --space tosca.lr=1e-4..1e-1:log --space tosca.epochs=1..20 \\
          --launcher local --jobs 2
      cl-bench run --methods tosca --scenario synthetic --tuned --seeds 1993,1994
      cl-bench run --methods tosca --scenario fmnist --tuned-on synthetic
    """
    options = api.launch_options(
        launcher,
        jobs=jobs,
        slurm_partition=slurm_partition,
        slurm_gpus=slurm_gpus,
        slurm_cpus=slurm_cpus,
        slurm_time=slurm_time,
        slurm_array_parallelism=slurm_array_parallelism,
    )
    api.tune(
        method,
        scenario,
        seed_list(seeds),
        trials=trials,
        space=space or [],
        objective=objective,
        validation=validation,
        out=out,
        options=options,
        echo=typer.echo,
        sets=sets or [],
        backbone=backbone,
        weights=weights,
        image_size=image_size,
        data_root=data_root,
        device=device,
        precision=precision,
        protocol=protocol,
        progress=progress,
    )
