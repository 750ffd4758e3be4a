"""What every ``cl-bench`` command shares: help text from docstrings, bad input as one
paragraph and exit code 2, the ``--cards`` option and the help panels."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

import typer

from cl_bench import api


def reflowed(doc: str) -> str:
    """A docstring made into help text. Typer's rich help keeps the text's line breaks (in
    the command list, and after the first paragraph on a command's page), so the lines of
    a prose paragraph are joined into one, for rich to wrap to the terminal's width; an
    indented line (an example command, or the continuation of one) stays a line of its
    own, as written."""
    paragraphs = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not line.startswith(" ") and not lines[-1].startswith(" "):
                lines[-1] += " " + line
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def command(group: typer.Typer, fn, name: str | None = None):
    """Register ``fn`` as ``group``'s command ``name``, with the function's docstring as the
    help (`reflowed`). The docstring's first paragraph is the command's line in the command
    list; then come the details and the examples, indented, one command line each (Typer
    dedents what follows the first paragraph, so a details paragraph before the examples
    keeps their indentation)."""
    return group.command(name, help=reflowed(fn.__doc__ or ""))(fn)


def user_errors(fn):
    """Bad input -> one paragraph on stderr, exit code 2, no traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except api.UserError as e:
            typer.echo(f"error: {e.paragraph()}", err=True)
            raise typer.Exit(2) from None

    return wrapper


def csv(text: str | None) -> list[str]:
    """``"a, b,"`` -> ``["a", "b"]``: a comma-separated option's items."""
    return [t.strip() for t in text.split(",") if t.strip()] if text else []


def cards_option(panel: str | None = None):
    """The ``--cards`` option of a command, shown in its help's panel ``panel`` (None: the
    Options panel, with ``--help``)."""
    return typer.Option(
        "--cards",
        rich_help_panel=panel,
        help="A folder of your own cards (YAML: methods with strategy:, scenarios with "
        "dataset:, suites with runs:), beside the built-in ones, CL_BENCH_CARDS and "
        "installed packages' cards. Repeatable or comma-separated.",
    )


# A switch's metavar. A switch takes no value, so its row in the help shows no type (not
# Typer's "<bool>"). A panel of switches then spends no columns on types: the names of a
# long switch and of its negative (--slurm-requeue, --no-slurm-requeue) leave the help
# text 30 columns or more at 80 (tests/integration/test_help_text.py), which "<bool>"
# beside them would not. Typer's `metavar` changes the help only: the option is called as
# before.
SWITCH = ""
OUTPUT = "Output"  # the panel of run's, account's, report's and data check's output options


def with_cards(fn=None, *, warn: bool = True):
    """The command's ``--cards`` folders count while it runs, and only then. An
    installed package whose cards cannot be read costs its own cards only: the command
    runs, with a warning (``warn``; ``list`` shows it as an error instead)."""
    if fn is None:
        return functools.partial(with_cards, warn=warn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with api.cards(Path(p) for p in csv(",".join(kwargs.get("cards") or []))) as broken:
            for paragraph in broken if warn else ():
                typer.echo(f"warning: {paragraph} Its cards are left out.", err=True)
            return fn(*args, **kwargs)

    return wrapper


def deprecated_out(old: Path | None, results: Path) -> Path:
    """A command's results folder to read: ``--results``, or the old spelling ``--out``
    (hidden), which still works, with a one-line warning."""
    if old is None:
        return results
    typer.echo("warning: --out is deprecated here; use --results (same meaning).", err=True)
    return old
