"""The options of ``cl-bench run`` that take settings from a finished ``cl-bench tune``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cl_bench.commands.run_options import RUN_WHAT
from cl_bench.commands.shared import SWITCH

Tuned = Annotated[
    bool,
    typer.Option(
        "--tuned",
        rich_help_panel=RUN_WHAT,
        metavar=SWITCH,
        help="Run each method with the settings its finished `cl-bench tune` search on this "
        "scenario chose (the newest one). The runs record it and reports mark them "
        "[tuned].",
    ),
]

TunedOn = Annotated[
    str | None,
    typer.Option(
        rich_help_panel=RUN_WHAT,
        help="As --tuned, with the settings a search on another scenario chose: tune on one "
        "scenario, evaluate on another (reports mark the rows [tuned on SCENARIO]).",
    ),
]

TunedFrom = Annotated[
    Path,
    typer.Option(
        rich_help_panel=RUN_WHAT,
        help="Where --tuned looks for searches (cl-bench tune --results).",
    ),
]
