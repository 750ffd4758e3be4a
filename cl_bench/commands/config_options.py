"""The options of ``cl-bench run`` that read what to run from a file: ``--config`` (a YAML
file of run options, :mod:`cl_bench.api.config_file`) and ``--suite`` (a suite's entries,
:mod:`cl_bench.api.suites`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cl_bench.commands.run_options import RUN_WHAT

Config = Annotated[
    Path | None,
    typer.Option(
        rich_help_panel=RUN_WHAT,
        help="A YAML file of run options (methods, scenario, seeds, sets, launcher, out, "
        "...; see docs/usage.md); options given here win over the file.",
    ),
]

Suite = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=RUN_WHAT,
        help="Run a suite's entries (see `cl-bench list suites`); its runs go to "
        "results/<suite> unless --out says otherwise.",
    ),
]

# the options that cl_bench.api.plan takes by name, as run passes them on
PLANNED = (
    "out",
    "backbone",
    "weights",
    "image_size",
    "data_root",
    "download",
    "device",
    "precision",
    "progress",
    "protocol",
    "deterministic",
    "validation",
)
