"""``cl-bench check``: the accuracy regression gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cl_bench import api
from cl_bench.commands.shared import SWITCH, cards_option, user_errors, with_cards

CHECK_SUITE = "Suite"
CHECK_BASELINE = "Baseline"
# --update-baseline and --no-update-baseline need a panel of switches (see SWITCH).
CHECK_UPDATE = "Raising the baseline"


@user_errors
@with_cards
def check(
    suite: Annotated[
        str,
        typer.Option(rich_help_panel=CHECK_SUITE, help="Suite in benchmarks/ (a YAML with runs:)."),
    ] = "ci",
    out: Annotated[
        Path | None,
        typer.Option(
            rich_help_panel=CHECK_SUITE,
            help="Where the suite's runs go (default: results/<suite>, where `cl-bench run "
            "--suite` puts them too); finished runs are reused.",
        ),
    ] = None,
    progress: Annotated[
        bool, typer.Option(rich_help_panel=CHECK_SUITE, metavar=SWITCH, help="Show progress bars.")
    ] = True,
    cards: Annotated[list[str] | None, cards_option(CHECK_SUITE)] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            rich_help_panel=CHECK_BASELINE,
            help="Baseline JSON; default: the built-in suite's results/baselines/<suite>.json, "
            "or baselines/<suite>.json beside a suite from --cards.",
        ),
    ] = None,
    tolerance: Annotated[
        float | None,
        typer.Option(
            rich_help_panel=CHECK_BASELINE,
            help="Override every metric's tolerance (accuracy points).",
        ),
    ] = None,
    update_baseline: Annotated[
        bool,
        typer.Option(
            rich_help_panel=CHECK_UPDATE,
            metavar=SWITCH,
            help="Rewrite the baseline with the numbers measured now (tolerance default 1.0) "
            "and new provenance.",
        ),
    ] = False,
) -> None:
    """Run a suite and compare its average and last accuracy with the baseline.

    The exit status is 1 when a metric drops by more than its tolerance or a run is
    missing, 0 otherwise. An improvement beyond tolerance is reported, not taken: the
    baseline is raised on purpose, with --update-baseline.

    Examples:
      cl-bench check --suite ci
      cl-bench check --suite ci --update-baseline
    """
    gate = api.check(
        suite,
        out=api.suite_out(suite) if out is None else out,
        baseline=baseline,
        tolerance=tolerance,
        update_baseline=update_baseline,
        progress=progress,
        echo=typer.echo,
    )
    if gate.written:
        typer.echo(f"baseline written: {gate.baseline}")
        return
    typer.echo("\n" + gate.table())
    for note in gate.notes:
        typer.echo(note)
    if gate.improved:
        typer.echo(
            f"{len(gate.improved)} metric(s) improved beyond tolerance: update the baseline "
            "on purpose with --update-baseline."
        )
    if gate.failed:
        typer.echo(f"FAILED: {', '.join(f'{r.key} {r.metric} {r.status}' for r in gate.failed)}")
        raise typer.Exit(1)
    typer.echo("check passed")
