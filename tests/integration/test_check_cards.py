"""`cl-bench check` on a suite from a `--cards` folder: the command it prints to write
a missing baseline works as printed. It left `--cards` out, and run as printed it
was refused with 'Unknown suite "mini"'."""

from __future__ import annotations

import re
import shlex

from tests.helpers.cards import MINI_SUITE
from tests.helpers.cli import invoke, refused

SUITE = "name: mini\nthreads: 2\n" + MINI_SUITE


def test_the_printed_baseline_command_works_as_printed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the printed command's relative paths, and its results/ci
    (tmp_path / "my cards").mkdir()
    (tmp_path / "my cards" / "mini.yaml").write_text(SUITE)
    check = ["check", "--cards", "my cards", "--suite", "mini", "--out", "out", "--no-progress"]
    missing = invoke(*check)
    refused(
        missing,
        "Baseline my cards/baselines/mini.json does not exist. Recreate it with "
        "`cl-bench check --cards 'my cards' --suite mini --update-baseline "
        "--baseline 'my cards/baselines/mini.json'`.",
    )
    printed = shlex.split(re.search(r"`(cl-bench check [^`]*)`", missing.stderr).group(1))
    made = invoke(*printed[1:])
    assert made.exit_code == 0, made.output
    assert "baseline written: my cards/baselines/mini.json" in made.stdout
    again = invoke(*check)
    assert again.exit_code == 0, again.output
    assert again.stdout.rstrip().endswith("check passed")
