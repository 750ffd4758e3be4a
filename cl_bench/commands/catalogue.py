"""``cl-bench list``, ``cl-bench data check`` and ``cl-bench cache``: what cl-bench knows
and holds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cl_bench import api
from cl_bench.commands.shared import OUTPUT, SWITCH, cards_option, user_errors, with_cards

DATA_WHAT = "What to check"


@user_errors
@with_cards(warn=False)
def list_(
    what: Annotated[str, typer.Argument(help="methods | scenarios | backbones | suites")],
    cards: Annotated[list[str] | None, cards_option()] = None,
) -> None:
    """List the known methods, scenarios, backbones or suites.

    A card's line ends with where it comes from: built-in, or the source and file (--cards,
    CL_BENCH_CARDS, an installed package's entry point).

    Examples:
      cl-bench list methods
      cl-bench list scenarios --cards ./my-cards
      cl-bench list suites
    """
    lines, bad = api.listing(what)
    for line in lines:
        typer.echo(line)
    for paragraph in bad:  # one broken card does not hide the others; the exit status says so
        typer.echo(f"error: {paragraph}", err=True)
    if bad:
        raise typer.Exit(2)


@user_errors
@with_cards
def data_check(
    scenario: Annotated[
        str,
        typer.Option(rich_help_panel=DATA_WHAT, help="Scenario (see `cl-bench list scenarios`)."),
    ],
    data_root: Annotated[
        Path | None,
        typer.Option(
            envvar="CL_BENCH_DATA",
            rich_help_panel=DATA_WHAT,
            help="Folder with the scenario's data (env CL_BENCH_DATA).",
        ),
    ] = None,
    cards: Annotated[list[str] | None, cards_option(DATA_WHAT)] = None,
    progress: Annotated[
        bool, typer.Option(rich_help_panel=OUTPUT, metavar=SWITCH, help="Show progress bars.")
    ] = True,
) -> None:
    """Check a scenario's data: counts, links, and every image decoded.

    Counts classes and images per split against the expected numbers, lists links that lead
    nowhere (dangling, looping) and image names that are no file, and decodes every image,
    listing unreadable files. The exit status is 0 when all is as expected, 1 when problems
    are listed, and 2 when the data is missing (the message shows the expected tree).

    Examples:
      cl-bench data check --scenario imagenet-a --data-root ~/data
      cl-bench data check --scenario cub --data-root ~/data --no-progress
    """
    lines, ok = api.check_data(scenario, data_root, progress)
    typer.echo("\n".join(lines))
    if not ok:
        raise typer.Exit(1)


@user_errors
def cache(what: Annotated[str, typer.Argument(help="info | clear")]) -> None:
    """Show or clear the on-disk feature cache.

    The cache ($CL_BENCH_CACHE, default ~/.cache/cl-bench/features) holds the frozen
    backbone's features, keyed by backbone, weights digest, dataset fingerprint, transform,
    precision and view, and shared by every method, seed and invocation. info lists each
    cached array and the totals; clear removes them, and a later run computes them again.

    Examples:
      cl-bench cache info
      cl-bench cache clear
    """
    typer.echo("\n".join(api.cache(what)))
