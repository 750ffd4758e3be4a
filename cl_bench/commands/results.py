"""``cl-bench report`` and ``cl-bench status``: what a results folder holds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cl_bench import api
from cl_bench.commands.shared import (
    OUTPUT,
    SWITCH,
    cards_option,
    csv,
    deprecated_out,
    user_errors,
    with_cards,
)

REPORT_WHAT = "Results to report"


@user_errors
def status(
    results: Annotated[
        Path, typer.Option(help="Results folder (what `cl-bench run --out` wrote).")
    ] = Path("results"),
    out: Annotated[Path | None, typer.Option(hidden=True, help="Old name of --results.")] = None,
) -> None:
    """Show the state of every run in a results folder, and a one-line summary.

    A run is done; stale (a result of other code or package versions than those installed
    now, with what changed; `cl-bench run` computes it again); running (pid, host, SLURM
    job); failed (with the error's last line); invalid (a result file that is damaged or not
    a result, with what is wrong; `cl-bench run` computes it again); or pending (planned by
    a grid, or interrupted). Only the folder and the installed code are read: no data,
    backbone or scheduler is needed.

    Examples:
      cl-bench status
      cl-bench status --results results/ci
    """
    typer.echo(api.status_text(deprecated_out(out, results)))


@user_errors
@with_cards
def report(
    results: Annotated[
        Path,
        typer.Option(
            rich_help_panel=REPORT_WHAT, help="Results folder (what `cl-bench run --out` wrote)."
        ),
    ] = Path("results"),
    scenarios: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=REPORT_WHAT,
            help="Comma-separated scenarios to include. Default: all in the results.",
        ),
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=REPORT_WHAT,
            help="Comma-separated methods to include. Default: all in the results.",
        ),
    ] = None,
    suite: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=REPORT_WHAT,
            help="Only the scenarios and methods of this suite's entries, read from "
            "results/<suite> unless --results says otherwise (see `cl-bench list suites`).",
        ),
    ] = None,
    allow_stale: Annotated[
        bool,
        typer.Option(
            "--allow-stale",
            rich_help_panel=REPORT_WHAT,
            metavar=SWITCH,
            help="Also show results made by other code or package versions than those "
            "installed now, marked \\[stale] (refused otherwise; `cl-bench status` says "
            "what changed).",
        ),
    ] = False,
    against: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=REPORT_WHAT,
            metavar="NAME",
            help="Compare every row with this method (or row label), paired by seed. "
            "Default: the best row by average accuracy.",
        ),
    ] = None,
    cards: Annotated[list[str] | None, cards_option(REPORT_WHAT)] = None,
    out: Annotated[
        Path,
        typer.Option(rich_help_panel=OUTPUT, help="Report folder; its report files are replaced."),
    ] = Path("reports/latest"),
    format_: Annotated[
        str,
        typer.Option(
            "--format",
            rich_help_panel=OUTPUT,
            help="Comma-separated: md (README, PRs), tex (booktabs), csv (long: one row per run "
            "and metric), html (one self-contained file).",
        ),
    ] = "md,tex,csv,html",
    images: Annotated[
        str,
        typer.Option(
            rich_help_panel=OUTPUT,
            help="Plot files to write, comma-separated: png, svg, pdf, or none (the HTML "
            "embeds its own PNGs).",
        ),
    ] = "png,svg",
    figure_size: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=OUTPUT,
            metavar="WxH",
            help="Figure size in inches, e.g. 6.4x4. Default: 7.2x4.5.",
        ),
    ] = None,
    dpi: Annotated[
        int | None,
        typer.Option(rich_help_panel=OUTPUT, help="Dots per inch of the PNG files. Default: 150."),
    ] = None,
) -> None:
    """Write tables and plots from result files.

    Per scenario: methods x accuracy (mean +- std over seeds), forgetting, parameters,
    GFLOPs, time and peak memory, under a caption naming the backbone and its weights,
    with the published numbers beside the measured ones; runs that differ in protocol or
    backbone are separate rows. Each row's average accuracy is compared with a reference
    row over the seeds both ran (mean difference, 95 % interval, * for p < 0.05 in a
    paired t-test); bold marks a best only where it is significantly ahead. With 2 or
    more scenarios: average ranks, the Friedman test and a critical-difference diagram.
    A result of other code than the installed one is stale: run it again to recompute
    it, or show it marked with --allow-stale.

    Examples:
      cl-bench report --results results --out reports/latest
      cl-bench report --scenarios imagenet-a --methods tosca,l2p --format md,csv
      cl-bench report --images png,pdf --figure-size 6.4x4 --dpi 200
      cl-bench report --suite ci
      cl-bench report --against simplecil
    """
    if suite is not None:
        in_suite = api.suite_scope(suite)
        scenarios, methods = scenarios or ",".join(in_suite[0]), methods or ",".join(in_suite[1])
        results = api.suite_out(suite) if results == Path("results") else results
    written = api.report(
        results,
        out,
        formats=format_,
        images=[] if images.strip() == "none" else images,
        scenarios=csv(scenarios),
        methods=csv(methods),
        allow_stale=allow_stale,
        against=against,
        figure_size=figure_size,
        dpi=dpi,
        on_skip=lambda path, why: typer.echo(f"warning: skipped {path}: {why}", err=True),
    )
    typer.echo(f"wrote {len(written)} files to {out}:")
    for path in written:
        typer.echo(f"  {path}")
