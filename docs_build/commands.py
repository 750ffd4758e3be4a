"""The command reference: the ``--help`` of ``cl-bench`` and of every command and
sub-command, rendered in this process at a fixed width, so the page is what a terminal
of 100 columns shows and follows the help text wherever it changes."""

from __future__ import annotations

from collections.abc import Iterator

from docs_build import DocsError
from docs_build.md import block

PAGE = "commands.md"
WIDTH = 100


def command_paths(command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path of a click group, depth first, in the order they were added
    (hidden commands are left out, as ``--help`` leaves them out)."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        if not getattr(sub, "hidden", False):
            yield from command_paths(sub, (*path, name))


def help_text(app, path: tuple[str, ...]) -> str:
    """``cl-bench PATH --help`` at :data:`WIDTH` columns, without colour."""
    import typer.rich_utils as rich_utils
    from typer.testing import CliRunner

    saved = rich_utils.MAX_WIDTH, rich_utils.FORCE_TERMINAL, rich_utils.COLOR_SYSTEM
    rich_utils.MAX_WIDTH, rich_utils.FORCE_TERMINAL, rich_utils.COLOR_SYSTEM = WIDTH, False, None
    try:
        result = CliRunner().invoke(
            app,
            [*path, "--help"],
            prog_name="cl-bench",
            color=False,
            env={"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH), "NO_COLOR": "1"},
        )
    finally:
        rich_utils.MAX_WIDTH, rich_utils.FORCE_TERMINAL, rich_utils.COLOR_SYSTEM = saved
    if result.exit_code != 0:
        raise DocsError(
            f"`cl-bench {' '.join(path)} --help` exited {result.exit_code}: "
            f"{result.output.strip() or result.exception!r}"
        )
    return "\n".join(line.rstrip() for line in result.output.splitlines()).strip("\n")


def command_page(app=None) -> dict[str, str]:
    """``{commands.md: ...}``: one section per command path, its help in a code block."""
    from typer.main import get_command

    if app is None:
        from cl_bench.commands.cli import app
    root = get_command(app)
    lines = [
        "# Command reference",
        "",
        f"The `--help` of every `cl-bench` command, as a terminal {WIDTH} columns wide "
        "shows it; generated from the command line itself when the site is built.",
        "",
    ]
    for path in command_paths(root):
        name = " ".join(("cl-bench", *path))
        lines += [f"## {name}", "", *block(help_text(app, path), "text")]
    return {PAGE: "\n".join(lines).rstrip() + "\n"}
