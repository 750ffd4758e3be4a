"""The ``cl-bench`` command line (Typer): each command is a function of its own module
over the Python API (:mod:`cl_bench.api`); here they are put together, in the order of
the help's command list."""

from __future__ import annotations

import typer

from cl_bench.commands import account, catalogue, check, results, run, tune
from cl_bench.commands.quick_exit import exit_quickly
from cl_bench.commands.shared import command, reflowed

app = typer.Typer(
    help=reflowed("""
    Benchmark continual-learning methods on pretrained vision models: every method on the
    same class-incremental stream, backbone, class order and seeds.

    `cl-bench COMMAND --help` says what a command does, with its options and examples.

    Examples:
      cl-bench list methods
      cl-bench run --methods tosca,l2p --scenario imagenet-a --data-root ~/data
      cl-bench report --results results --out reports/latest
    """),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

data_app = typer.Typer(
    help=reflowed("""
    Check a scenario's data before running it.

    A missing or unreadable image is found here, in one pass over the data, rather than by
    a run that stops partway.

    Examples:
      cl-bench data check --scenario imagenet-a --data-root ~/data
    """),
    no_args_is_help=True,
)

command(app, run.run)
command(app, tune.tune)
command(app, results.status)
command(app, account.account)
command(app, check.check)
command(app, catalogue.cache)
app.add_typer(data_app, name="data")
command(data_app, catalogue.data_check, "check")
command(app, results.report)
command(app, catalogue.list_, "list")


def main() -> None:
    """The `cl-bench` entry point: the command, then a quick exit (`quick_exit`)."""
    try:
        app()
    except SystemExit as done:
        exit_quickly(done.code)
    exit_quickly(0)


if __name__ == "__main__":
    main()
