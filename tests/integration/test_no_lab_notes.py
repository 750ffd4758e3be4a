"""No lab notes in what a user reads: the tracked documentation, the bench's manual, figure
catalogue and measurements, the cards, and the docstrings and comments of cl_bench name no
working period (a numbered or "this"/"last" one, or a list of what was found on the way,
by LAB_NOTES below; a reader sees a date, a CPU model and a commit). A measurement
is a dated file under bench/results/ (bench/measurements.py); what a text says holds at
any time.

"Session" has one meaning here besides a working period: the first task of a
continual-learning run, in "first-session adaptation" (APER, RanPAC) and the phrases
around it. Those exact phrases are allowed, nothing else with the word."""

from __future__ import annotations

import ast
import fnmatch
import io
import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# every tracked file a user reads as text, whole
READ_WHOLE = (
    "README.md",
    "CHANGELOG.md",
    "docs/*.md",
    "docs/**/*.md",
    "bench/README.md",
    "bench/parity/README.md",
    "bench/figures.yaml",
    "bench/results/*.json",
    "methods/*.yaml",
    "benchmarks/*.yaml",
)
# and the docstrings and comments of the package
READ_PROSE = ("cl_bench/*.py", "cl_bench/**/*.py")

ORDINAL = (
    r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|"
    r"eleventh|twelfth|last|this|that|next|previous|earlier|later|same|current)"
)
LAB_NOTES = re.compile(
    r"\bsessions?\b"  # a working period, by any name
    rf"|\b{ORDINAL}\s+(?:working\s+)?period\b"  # "the sixth period"
    r"|\bworking\s+periods?\b"
    r"|\bfound\s+on\s+the\s+way\b"
    r"|\blab(?:oratory)?\s+notes?\b",
    re.IGNORECASE,
)
# the continual-learning sense: the first task of a run (APER's and RanPAC's adaptation)
ALLOWED = re.compile(
    r"\bfirst-session\s+(?:adaptation|adapted|method(?:s|'s)?)\b"
    r"|\bfirst\s+session\s+trains\b"
    r"|\bfirst\s+session's\s+head\b",
    re.IGNORECASE,
)


def tracked(patterns: tuple[str, ...]) -> list[str]:
    files = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True)
        .stdout.decode()
        .split("\0")
    )
    return sorted(
        f
        for f in files
        if f and (ROOT / f).is_file() and any(fnmatch.fnmatchcase(f, p) for p in patterns)
    )


def prose_of_python(source: str) -> list[tuple[int, str]]:
    """The docstrings and comments of a module, each as (first line, text): a docstring's
    text is its source lines, so that a hit's line is the file's."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
        ):
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                found.append((first.lineno, "\n".join(lines[first.lineno - 1 : first.end_lineno])))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return found


def hits(text: str, first_line: int = 1) -> list[tuple[int, str]]:
    """(line, phrase) of every lab-note phrase in ``text`` outside the allowed ones."""
    allowed = [m.span() for m in ALLOWED.finditer(text)]
    out = []
    for m in LAB_NOTES.finditer(text):
        if any(a <= m.start() and m.end() <= b for a, b in allowed):
            continue
        line = first_line + text.count("\n", 0, m.start())
        out.append((line, " ".join(m.group().split())))
    return out


def test_the_detector_tells_working_periods_from_the_first_task():
    assert hits("measured in the sixth session") == [(1, "session")]
    assert hits("Earlier in the same\nsession, before") == [(2, "session")]
    assert hits("Found on the way: a bug") == [(1, "Found on the way")]
    assert hits("figures of the seventh period") == [(1, "seventh period")]
    assert (
        hits(
            "first-session adaptation (APER); the first-session\nmethods' features; "
            "What the first session trains"
        )
        == []
    )
    assert hits("the first session of this day") == [(1, "session")]
    python = '"""Module."""\n\n\ndef f():\n    """Doc,\n    last session."""\n    # this session\n'
    assert [
        (line, p) for first, text in prose_of_python(python) for line, p in hits(text, first)
    ] == [(6, "session"), (7, "session")]


def test_no_text_a_user_reads_names_a_working_period():
    found = []
    for name in tracked(READ_WHOLE):
        text = (ROOT / name).read_text(encoding="utf-8")
        found += [f"{name}:{line}: {phrase}" for line, phrase in hits(text)]
    for name in tracked(READ_PROSE):
        source = (ROOT / name).read_text(encoding="utf-8")
        for first, text in prose_of_python(source):
            found += [f"{name}:{line}: {phrase}" for line, phrase in hits(text, first)]
    assert not found, (
        "lab notes (a measurement belongs in bench/results/, dated; a text "
        "says what holds at any time):\n" + "\n".join(found)
    )
