"""The options of ``cl-bench run`` that run a grid as separate jobs: ``--launcher local``
(worker processes here) or ``--launcher slurm`` (a SLURM job array)."""

from __future__ import annotations

from typing import Annotated

import typer

from cl_bench.commands.shared import SWITCH

RUN_GRID = "Grid: local workers and Slurm"
RUN_SLURM_SWITCHES = "Grid on Slurm: waiting and requeueing"

Launcher = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=RUN_GRID,
        help="Run each method x scenario x seed as its own job: local (parallel worker "
        "processes here) or slurm (a submitit job array). Default: one after another "
        "in this process.",
    ),
]

Jobs = Annotated[
    int | None,
    typer.Option(
        rich_help_panel=RUN_GRID,
        help="--launcher local: worker processes (default: one per CPU core on CPU, one "
        "per GPU with --device cuda/auto, each worker on its own GPU); torch threads per "
        "worker = cores / jobs.",
    ),
]

SlurmPartition = Annotated[
    str | None, typer.Option(rich_help_panel=RUN_GRID, help="SLURM partition.")
]

SlurmGpus = Annotated[
    int | None,
    typer.Option(
        rich_help_panel=RUN_GRID,
        help="GPUs per SLURM job (1: a run is one process on one GPU); with --device auto, "
        "jobs with GPUs run on cuda.",
    ),
]

SlurmGres = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=RUN_GRID,
        help="SLURM gres per job instead of --slurm-gpus, e.g. gpu:a100:1, for sites that "
        "need --gres; its type tells the plan the GPU architecture (part of every "
        "result's key; bf16 from sm_80 on, else fp16).",
    ),
]

SlurmGpuArch = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=RUN_GRID,
        help="The jobs' GPU architecture (sm_70, sm_80, sm_90, ...) or GPU type (a100, "
        "a100-80gb, h100, ...) when --slurm-gres names no type and sinfo does not tell; "
        "each job checks its node against it. A type's memory is checked against the "
        "runs' memory estimate before submitting (a100: its smaller, 40 GB card, unless "
        "named a100-80gb).",
    ),
]

SlurmCpus = Annotated[
    int | None,
    typer.Option(rich_help_panel=RUN_GRID, help="CPUs per SLURM job (also its torch threads)."),
]

SlurmTime = Annotated[
    int | None,
    typer.Option(
        rich_help_panel=RUN_GRID,
        help="Time limit per SLURM job in minutes (default 240, at least 3); a run that "
        "reaches it is run again by the next invocation (or requeued and resumed "
        "with --slurm-requeue).",
    ),
]

SlurmArrayParallelism = Annotated[
    int | None,
    typer.Option(
        rich_help_panel=RUN_GRID, help="At most this many SLURM jobs of the grid at once."
    ),
]

Wait = Annotated[
    bool,
    typer.Option(
        rich_help_panel=RUN_SLURM_SWITCHES,
        metavar=SWITCH,
        help="--launcher slurm: wait for the jobs and print the summary, or only submit "
        "(follow with `cl-bench status`).",
    ),
]

SlurmRequeue = Annotated[
    bool,
    typer.Option(
        rich_help_panel=RUN_SLURM_SWITCHES,
        metavar=SWITCH,
        help="--launcher slurm: requeue a job that is preempted or reaches --slurm-time; "
        "it resumes its run from the last finished task.",
    ),
]
