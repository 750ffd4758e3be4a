"""The config file a run came from is recorded (``config_file``: its path and the
SHA-256 digest of its content) and shown by ``status`` and the report's CSV, without
being part of the run's identity: the same experiment from the command line and from a
config file is one result, reused by either, not run twice."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
from pathlib import Path

import pytest

import cl_bench
from cl_bench import api
from cl_bench.errors import UserError
from cl_bench.store.records import InvalidResult, Result
from tests.helpers.cli import SYNTHETIC, invoke, status_of

CONFIG = """\
methods: [simplecil]
scenario: synthetic
seeds: [1993, 1994]
precision: fp32
progress: false
out: {out}
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> tuple[Path, Path, dict[int, dict]]:
    """Seed 1994 from the command line, then seeds 1993 and 1994 from a config file,
    which plans seed 1994 as done: the command line's result."""
    root = tmp_path_factory.mktemp("config")
    out, config = root / "out", root / "run.yaml"
    config.write_text(CONFIG.format(out=out))
    first = invoke(
        "run", *SYNTHETIC, "--methods", "simplecil", "--seeds", "1994", "--out", str(out)
    )
    assert first.exit_code == 0, first.output
    planned = invoke("run", "--config", str(config), "--dry-run")
    assert planned.exit_code == 0, planned.output
    [path] = out.glob("runs/synthetic/simplecil/1994-*.json")
    # the command line's result is the config file's run (stale: the source changed since)
    assert re.search(f"(done|stale) +simplecil seed 1994  {path}\n", planned.stdout), planned.stdout
    assert "pending  simplecil seed 1993" in planned.stdout, planned.stdout
    second = invoke("run", "--config", str(config), "--seeds", "1993")  # 1994 is done
    assert second.exit_code == 0, second.output
    records = {
        json.loads(p.read_text())["seed"]: json.loads(p.read_text())
        for p in out.glob("runs/synthetic/simplecil/*.json")
    }
    return out, config, records


def test_the_record_names_the_config_file_and_its_digest(ran):
    out, config, records = ran
    assert sorted(records) == [1993, 1994]
    assert records[1993]["config_file"] == {
        "path": str(config),
        "sha256": api.config_digest(config),
    }
    assert len(records[1993]["config_file"]["sha256"]) == 12
    assert "config_file" not in records[1994]  # run from the command line, then reused
    assert records[1993]["config"]["method"] == records[1994]["config"]["method"]


def test_the_command_line_plans_the_config_files_runs(ran):
    out, _, _ = ran
    cli = [*SYNTHETIC, "--methods", "simplecil", "--seeds", "1993,1994", "--out", str(out)]
    planned = invoke("run", *cli, "--dry-run")
    assert planned.exit_code == 0, planned.output
    for path in out.glob("runs/synthetic/simplecil/*.json"):  # stale: the source changed
        assert re.search(f"(done|stale) +simplecil seed {path.name[:4]}  {path}\n", planned.stdout)
    assert "2 runs planned: " in planned.stdout and " pending" not in planned.stdout.replace(
        "0 pending", ""
    )


def test_status_and_the_report_csv_show_the_config_file(ran, tmp_path):
    out, config, records = ran
    digest = api.config_digest(config)
    lines = status_of(out).splitlines()
    [seed_1993] = [line for line in lines if " 1993 " in line]
    [seed_1994] = [line for line in lines if " 1994 " in line]
    assert seed_1993.endswith(f"from {config} (sha256 {digest})")
    assert " from " not in seed_1994
    cl_bench.report(out, out=tmp_path / "rep", formats=["csv"], images=[])
    rows = list(csv.DictReader((tmp_path / "rep" / "runs.csv").open()))
    sources = {(r["seed"], r["config_file"]) for r in rows}
    assert sources == {("1993", f"{config} (sha256 {digest})"), ("1994", "")}


def test_config_file_is_checked_and_left_out_of_the_identity(ran):
    out, _, records = ran
    record = records[1993]
    [path] = out.glob("runs/synthetic/simplecil/1993-*.json")
    result = Result.from_dict(record, path)
    assert result.config_source.startswith(f"{record['config_file']['path']} (sha256 ")
    plain = {k: v for k, v in record.items() if k != "config_file"}
    assert Result.from_dict(plain, path).config_hash == result.config_hash
    assert dataclasses.replace(result, config_file=None).key == result.key
    for bad in (
        "run.yaml",
        {"path": "run.yaml"},
        {"path": 3, "sha256": "ab" * 6},
        {"path": "run.yaml", "sha256": "not hex here"},
    ):
        with pytest.raises(InvalidResult, match="config_file is .*, not a path and a sha256"):
            Result.from_dict({**record, "config_file": bad}, path)


def test_the_api_records_the_file_load_config_read(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG.format(out=tmp_path / "out"))
    options = cl_bench.load_config(config)
    assert options["config_file"] == config
    options.pop("progress")
    requests = api.plan(**{k: v for k, v in options.items() if k != "settings"})
    assert [r.config_file for r in requests] == [
        {"path": str(config), "sha256": api.config_digest(config)}
    ]
    assert api.plan(["simplecil"], "synthetic")[0].config_file is None
    with pytest.raises(UserError, match="config_file='nope.yaml': no such file"):
        api.plan(["simplecil"], "synthetic", config_file="nope.yaml")
