"""A suite entry's ``sets`` item with commas sweeps as ``--set owner.key=a,b`` does on the
command line: ``run --suite`` plans one run per value, each with the identity (result
file) of the command line's sweep; ``list suites`` counts them; ``check`` refuses a swept
entry before anything runs, naming the fix; a bad sweep is refused when the suite
loads, naming the entry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.cli import invoke, refused

SWEPT = """\
runs:
  - name: synth
    scenario: synthetic
    backbone: efficientnet_lite0
    image_size: 32
    precision: fp32
    methods: [simplecil]
    seeds: [1993, 1994]
    sets:
      - simplecil.eval_batch_size=16,32
      - scenario.increment=2
"""
CLI = [
    *("--scenario", "synthetic", "--backbone", "efficientnet_lite0", "--image-size", "32"),
    *("--precision", "fp32", "--methods", "simplecil", "--seeds", "1993,1994"),
    *("--set", "simplecil.eval_batch_size=16,32", "--set", "scenario.increment=2"),
]


def planned_files(stdout: str) -> list[str]:
    """The result files a dry run plans, in order."""
    return re.findall(r"pending +simplecil seed \d+ +\S+/(\d+-[0-9a-f]+\.json)", stdout)


@pytest.fixture
def cards(tmp_path, monkeypatch) -> list[str]:
    monkeypatch.chdir(tmp_path)
    Path("cards").mkdir()
    Path("cards/swept.yaml").write_text(SWEPT)
    return ["--cards", "cards", "--suite", "swept"]


def test_a_suite_sweeps_as_the_command_line_does(cards):
    suite = invoke("run", *cards, "--dry-run")
    assert suite.exit_code == 0, suite.output
    line = invoke("run", *CLI, "--out", "results/swept", "--dry-run")
    assert line.exit_code == 0, line.output
    files = planned_files(suite.stdout)
    assert len(files) == 4 and len(set(files)) == 4  # 2 values x 2 seeds
    assert files == planned_files(line.stdout)
    assert "4 runs planned: 0 done, 4 pending" in suite.stdout
    for value in (16, 32):
        assert suite.stdout.count(f"eval_batch_size={value} (--set)") == 2  # one per seed
    listed = invoke("list", "suites", "--cards", "cards")
    assert "swept          1 entries, 4 runs  (--cards: cards/swept.yaml)" in listed.stdout


def test_the_gate_refuses_a_swept_entry_naming_the_fix(cards):
    refused(
        invoke("check", *cards, "--update-baseline"),
        "Suite swept, entry 'synth' sweeps (\"simplecil.eval_batch_size=16,32\"): `cl-bench "
        "check` compares one result per <entry>/<method> with its baseline, and a sweep "
        "gives several. Give each value an entry of its own (e.g. name: synth-16 with sets: "
        "[simplecil.eval_batch_size=16]), or run and compare the sweep with `cl-bench run "
        "--suite swept` and `cl-bench report --suite swept`, which sweep.",
    )
    assert not Path("results").exists()


def test_a_bad_sweep_is_refused_when_the_suite_loads(cards):
    Path("cards/swept.yaml").write_text(
        SWEPT.replace("scenario.increment=2", "simplecil.eval_batch_size=8,8")
    )
    refused(
        invoke("run", *cards, "--dry-run"),
        "cards/swept.yaml, entry 1 of runs: ('synth'): --set \"simplecil.eval_batch_size=8,8\" "
        "sweeps simplecil.eval_batch_size a second time",
    )
