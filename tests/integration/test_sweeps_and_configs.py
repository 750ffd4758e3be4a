"""Sweeps, config files and suites outside the gate, end to end on the synthetic
scenario: a 2-value ``--set`` sweep gives two results whose identities are those of two
single ``--set`` runs; a ``--config`` file plans and runs the same grid, the command
line winning over it; ``run --suite``, ``report --suite``, ``list suites`` and
``check``'s per-suite results folder; ``status --out``, the old spelling of
``--results``, warns and works."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.cards import MINI_SUITE
from tests.helpers.cli import invoke, refused

SYN = ["--scenario", "synthetic", "--no-progress", "--precision", "fp32", "--methods", "tosca"]

GRID = """\
methods: [tosca]
scenario: synthetic
sets:
  - tosca.epochs=1,2
precision: fp32
progress: false
out: {out}
"""


def records(out: Path) -> dict[int, tuple[str, dict]]:
    """epochs -> (file name, record) of every tosca result in ``out``."""
    found = {}
    for path in sorted(out.glob("runs/synthetic/tosca/*.json")):
        record = json.loads(path.read_text())
        found[record["config"]["method"]["epochs"]] = (path.name, record)
    return found


def test_a_sweep_runs_each_value_with_the_identity_of_a_single_set(tmp_path):
    out = tmp_path / "out"
    swept = invoke("run", "--out", str(out), *SYN, "--set", "tosca.epochs=1,2")
    assert swept.exit_code == 0, swept.output
    found = records(out)
    assert sorted(found) == [1, 2]
    names = {epochs: name for epochs, (name, _) in found.items()}
    assert names[1] != names[2]
    assert "tosca [selection=sample, epochs=1]" in swept.stdout
    assert "tosca [selection=sample, epochs=2]" in swept.stdout
    assert "seeds 1993, cpu/fp32, tosca.epochs=2" in swept.stdout

    for epochs in (1, 2):  # the single --set run is the same run: planned as done
        single = invoke(
            "run", "--out", str(out), *SYN, "--set", f"tosca.epochs={epochs}", "--dry-run"
        )
        assert single.exit_code == 0, single.output
        assert f"done     tosca seed 1993  {out}/runs/synthetic/tosca/{names[epochs]}" in (
            single.stdout
        )

    config = tmp_path / "grid.yaml"
    config.write_text(GRID.format(out=out))
    planned = invoke("run", "--config", str(config), "--launcher", "local", "--dry-run")
    assert planned.exit_code == 0, planned.output
    assert planned.stdout.startswith(f"config: {config} (sha256 ")
    assert "2 runs planned: 2 done, 0 pending" in planned.stdout
    assert all(name in planned.stdout for name in names.values())

    ran = invoke("run", "--config", str(config))
    assert ran.exit_code == 0, ran.output
    assert ran.stdout.count("skip tosca seed 1993: finished") == 2

    other = tmp_path / "other"
    overridden = invoke(
        "run", "--config", str(config), "--set", "tosca.epochs=3", "--out", str(other), "--dry-run"
    )
    assert overridden.exit_code == 0, overridden.output
    assert "1 runs planned: 0 done, 1 pending" in overridden.stdout
    assert (
        "epochs=3 (--set)" in overridden.stdout and f"{other}/runs/synthetic" in overridden.stdout
    )


def test_an_unknown_config_key_is_refused_naming_the_known_ones(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("methods: [tosca]\nseed: [1993]\n")
    refused(
        invoke("run", "--config", str(config)),
        "has the unknown key 'seed'. Did you mean \"seeds\"? Known keys: methods, scenario, "
        "seeds, sets,",
    )


def test_a_suite_runs_reports_lists_and_checks_in_results_of_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("cards").mkdir()
    Path("cards/mini.yaml").write_text(MINI_SUITE)
    suite = ["--cards", "cards", "--suite", "mini"]
    listed = invoke("list", "suites", "--cards", "cards")
    assert listed.exit_code == 0, listed.output
    assert "mini           1 entries, 1 runs  (--cards: cards/mini.yaml)" in listed.stdout
    assert "ci             6 entries, 18 runs  (built-in)" in listed.stdout

    refused(invoke("run", *suite, "--methods", "tosca"), "leave out --methods")
    ran = invoke("run", *suite, "--no-progress")
    assert ran.exit_code == 0, ran.output
    (path,) = Path("results/mini/runs/synthetic/simplecil").glob("1993-*.json")
    assert f"-> {path}" in ran.stdout

    check = invoke("check", *suite, "--no-progress", "--update-baseline")
    assert check.exit_code == 0, check.output  # the run's result reused from results/mini
    assert f"skip simplecil seed 1993: finished ({path})" in check.stdout

    report = invoke("report", *suite, "--format", "csv", "--images", "none", "--out", "rep")
    assert report.exit_code == 0, report.output
    rows = Path("rep/runs.csv").read_text()
    assert "simplecil" in rows and "synthetic" in rows


def test_status_out_is_the_old_spelling_of_results_and_warns(tmp_path):
    new = invoke("status", "--results", str(tmp_path))
    old = invoke("status", "--out", str(tmp_path))
    assert new.exit_code == old.exit_code == 0
    assert old.stdout == new.stdout == "0 runs: 0 done, 0 running, 0 failed, 0 pending\n"
    assert old.stderr == "warning: --out is deprecated here; use --results (same meaning).\n"
    assert new.stderr == ""
