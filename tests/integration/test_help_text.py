"""`cl-bench --help` and every command's `--help`, rendered in-process at 80, 100 and
120 columns: prose that rich wraps to the width (no line broken mid-sentence by the source
text), and examples as literal command lines that the command line parses.

The commands come from the Typer app itself, so a new command or sub-command is covered
without a change here."""

from __future__ import annotations

import re
import shlex

import pytest
import typer
import typer.main
import typer.rich_utils
from typer.testing import CliRunner

from cl_bench.commands.cli import app

WIDTHS = (80, 100, 120)  # 100: the command reference page (docs_build/commands.py)
MISSION = "cl-bench run --methods tosca,l2p --scenario imagenet-a --data-root ~/data"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A line that ends with one of these ends mid-sentence: a lowercase word, a comma, a
# semicolon, a slash or an open bracket. A full stop, a colon or a closing bracket may
# end a paragraph or a list entry.
MID_SENTENCE = re.compile(r"[a-z,;/(\[]$")
SEGMENT = re.compile(r"\S+(?: \S+)*")  # a cell's text: words one space apart
HELP_ROOM = 30  # the least room of an option's help at 80 columns (help_rooms)
# An option's first line: its name 2 columns in (the border, the panel's padding), or 5
# after the column of a panel that marks a required option with a * (at 2).
NAMES_START = 5


def command_paths(group=None, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The top level, then every command and sub-command of the app, as argv prefixes (a
    group is what has ``commands``: Typer's click, vendored or not, has its own classes)."""
    group = group or typer.main.get_command(app)
    paths = [path] if not path else []
    for name, cmd in group.commands.items():
        paths.append((*path, name))
        if hasattr(cmd, "commands"):
            paths += command_paths(cmd, (*path, name))
    return paths


PATHS = command_paths()


def ids(path: tuple[str, ...]) -> str:
    return " ".join(("cl-bench", *path))


@pytest.fixture
def render(monkeypatch):
    """``cl-bench <path> --help`` as a terminal of the given width shows it, without
    colour, whatever the real terminal and environment say."""

    def help_text(path: tuple[str, ...], width: int) -> str:
        # Typer reads TERMINAL_WIDTH once, at import; rich reads COLUMNS and FORCE_COLOR
        # when the help's console is made.
        monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", width, raising=False)
        monkeypatch.setattr(typer.rich_utils, "FORCE_TERMINAL", False, raising=False)
        monkeypatch.setattr(typer.rich_utils, "COLOR_SYSTEM", None, raising=False)
        env = {
            "COLUMNS": str(width),
            "FORCE_COLOR": None,
            "NO_COLOR": None,
            "TTY_COMPATIBLE": None,
            "TTY_INTERACTIVE": None,
        }
        result = CliRunner().invoke(app, [*path, "--help"], prog_name="cl-bench", env=env)
        assert result.exit_code == 0, result.output
        return ANSI.sub("", result.output)

    return help_text


def cells(text: str, width: int):
    """Every line of a help as (its text, where its last cell starts, where that cell's
    text ends, where a cell's text may end at the latest), or None for a line with no
    text or a panel's top or bottom edge. A panel's line is taken without its borders,
    and its text ends inside the panel's one-column padding; a line outside the panels
    ends inside the help's one-column margin."""
    for line in text.splitlines():
        if line.startswith("│") and line.rstrip().endswith("│"):
            inner = line.rstrip()[1:-1]
            limit = len(inner) - 1
        elif line[:1] in ("╭", "╰"):
            yield None
            continue
        else:
            inner, limit = line, width - 1
        found = list(SEGMENT.finditer(inner))
        yield (inner, found[-1].start(), found[-1].end(), limit) if found else None


def hard_breaks(text: str, width: int) -> list[str]:
    """Lines that end mid-sentence although the next line's first word would have fitted
    after them: rich fills each line up to the width, so such a break was in the source.
    Examples (a line starting with ``cl-bench``) and their continuations (after a line
    ending with a backslash) are literal and left alone."""
    rows = list(cells(text, width))
    bad = []
    for row, after in zip(rows, rows[1:] + [None], strict=True):
        if row is None or after is None:
            continue
        inner, start, end, limit = row
        words = inner[start:end]
        next_inner = after[0]
        if (
            words.startswith("cl-bench ")
            or words.endswith("\\")
            or not MID_SENTENCE.search(words)
            or next_inner[:start].strip()
            or next_inner[start : start + 1] in ("", " ")
        ):
            continue  # an example, a sentence's end, or a new row, cell or paragraph next
        next_word = next_inner[start:].split()[0]
        if end + 1 + len(next_word) <= limit:
            bad.append(f"{words!r} (then {next_word!r})")
    return bad


def help_rooms(text: str) -> list[tuple[str, str, int]]:
    """(panel, name, room) for every option and argument of every panel but the command
    list: room is the columns from where its help text starts, on its first line, to the
    panel's right border (the text's columns and the panel's one-column padding). A panel
    is a table of its own: a ``*`` for a required one, the names (``--wait``, then
    ``--no-wait``), the type (``<int>``; none for a switch), then the help, whose
    continuation lines start under its first."""
    rooms, panel = [], None
    for line in text.splitlines():
        if line.startswith("╭"):
            panel = line.strip("╭╮─ ")
            continue
        if panel in (None, typer.rich_utils.COMMANDS_PANEL_TITLE) or not line.startswith("│"):
            panel = None if line.startswith("╰") else panel
            continue
        border = len(line.rstrip()) - 1
        found = list(SEGMENT.finditer(line, 1, border))
        if not found or found[0].start() > NAMES_START:
            continue  # a help's continuation line
        if found[0].group() == "*":
            found.pop(0)
        name, *rest = found
        while len(rest) > 1 and re.fullmatch(r"[-<]\S*", rest[0].group()):
            rest.pop(0)  # a negative switch (--no-wait), or the type
        rooms.append((panel, name.group(), border - rest[0].start()))
    return rooms


def examples(text: str) -> list[str]:
    """The example command lines of a help, continuation lines joined."""
    found, current = [], None
    for line in text.splitlines():
        stripped = line.strip(" │")
        if current is not None:
            current += " " + stripped
        elif stripped.startswith("cl-bench "):
            current = stripped
        else:
            continue
        if current.endswith("\\"):
            current = current[:-1].rstrip()
        else:
            found.append(current)
            current = None
    return found


def parse(example: str) -> None:
    """Parse an example's arguments as the command line would, without running it: an
    unknown command or option, a missing or a bad value raises a usage error (a
    ``typer.TyperException``)."""
    argv = shlex.split(example)[1:]
    cmd = typer.main.get_command(app)
    name = "cl-bench"
    while hasattr(cmd, "commands") and argv and argv[0] in cmd.commands:
        name, cmd, argv = argv[0], cmd.commands[argv[0]], argv[1:]
    assert not hasattr(cmd, "commands"), f"{example!r} names no command"
    cmd.make_context(name, argv)


def test_every_command_is_covered():
    assert {
        "run",
        "report",
        "check",
        "status",
        "account",
        "cache",
        "list",
        "data",
        "data check",
    } <= {" ".join(p) for p in PATHS}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", PATHS, ids=ids)
def test_help_reads_as_whole_sentences(render, path, width):
    """A hard break comes from a docstring given to Typer as it is: register a command
    with ``cl_bench.commands.cli.command``, which reflows it."""
    assert hard_breaks(render(path, width), width) == []


@pytest.mark.parametrize("path", PATHS, ids=ids)
def test_help_shows_examples_that_parse(render, path):
    shown = examples(render(path, 80))
    assert shown, f"`{ids(path)} --help` shows no example line starting with 'cl-bench '"
    assert shown == examples(render(path, 120)), "an example is wrapped at 80 columns"
    for example in shown:
        parse(example)


@pytest.mark.parametrize("path", PATHS, ids=ids)
def test_help_leaves_room_for_the_help_text(render, path):
    """At 80 columns each panel's columns are sized by its own options: no name or word is
    cut short with an ellipsis, and every help has room for a few words a line (grouping
    options with ``rich_help_panel``; a switch's type left out with ``metavar=SWITCH``)."""
    text = render(path, 80)
    assert "…" not in text, [line for line in text.splitlines() if "…" in line]
    rooms = help_rooms(text)
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    assert len(rooms) == 1 + sum(not p.hidden for p in cmd.params), rooms  # and --help
    assert [r for r in rooms if r[2] < HELP_ROOM] == []


def test_run_help_shows_the_mission_command(render):
    assert MISSION in examples(render(("run",), 80))


def test_the_rule_finds_a_hard_break():
    """The rule on a help in the old form, one docstring line broken in the source."""
    width = 80
    old = (
        "╭─ Commands ─╮\n"
        "│ run      Run methods x seeds on one or more scenarios and print average /    │\n"
        "│          last accuracy.                                                      │\n"
        "│          Finished runs are skipped, so an interrupted grid resumes by        │\n"
        "│          running the same command;                                           │\n"
        "│          a run that another process is computing is skipped too.             │\n"
        "╰────────────╯\n"
        " Show or clear the on-disk feature cache ($CL_BENCH_CACHE, default             \n"
        " ~/.cache/cl-bench/features): frozen features keyed by backbone, weights       \n"
        " digest.                                                                       \n"
    )
    assert hard_breaks(old, width) == ["'running the same command;' (then 'a')"]
    assert examples(
        " Examples:\n   cl-bench cache info\n   cl-bench run --seeds 1 \\\n       --jobs 2\n"
    ) == ["cl-bench cache info", "cl-bench run --seeds 1 --jobs 2"]
    with pytest.raises(typer.TyperException, match="--workers"):
        parse("cl-bench run --workers 2")


def test_the_rule_measures_the_old_layout():
    """The rule on `run --help` and `data check --help` in the old form, one table for all
    of a command's options: the longest names, and the negative switches' column, leave the
    help 19 columns in `run`, 29 in `data check`; the command list is left alone."""
    old = (
        "╭─ Options ─╮\n"
        "│ --scenario,--scena…                          <str>        Scenario, or       │\n"
        "│                                                           comma-separated    │\n"
        "│ --slurm-requeue        --no-slurm-requeue    <bool>       --launcher slurm:  │\n"
        "│                                                           requeue a job that │\n"
        "╰────────────╯\n"
        "╭─ Options ─╮\n"
        "│ *  --scenario                      <str>        Scenario (see `cl-bench list │\n"
        "│                                                 scenarios`).                 │\n"
        "│    --data-root                     <path>       Folder with the scenario's   │\n"
        "╰────────────╯\n"
        "╭─ Commands ─╮\n"
        "│ run      Run methods x seeds on one or more scenarios and print average and  │\n"
        "╰────────────╯\n"
    )
    assert help_rooms(old) == [
        ("Options", "--scenario,--scena…", 19),
        ("Options", "--slurm-requeue", 19),
        ("Options", "--scenario", 29),
        ("Options", "--data-root", 29),
    ]
