"""What counts as a finished run: damaged, foreign and stub result files are invalid for
`run` (computed again, same numbers as a clean run), `status` (a state of their own,
with why) and `report` (skipped with a warning naming the problem); a method or seed
named twice is one run."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from cl_bench.engine.runner import RunRequest
from cl_bench.reporting.summary import summary_table
from cl_bench.store import results
from cl_bench.store.record_check import problems, reason
from cl_bench.store.records import Result
from tests.helpers.cli import invoke

RUN = ["--scenario", "synthetic", "--no-progress", "--precision", "fp32", "--methods", "simplecil"]
NUMBERS = (
    "acc_matrix",
    "acc_seen",
    "avg_acc",
    "last_acc",
    "acc_task_mean",
    "avg_acc_task_mean",
    "last_acc_task_mean",
    "forgetting",
    "bwt",
    "routing_acc",
    "accounting",
    "class_order",
    "tasks",
    "config",
)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[Path, dict[int, Path]]:
    """SimpleCIL on `synthetic`, seeds 1993 and 1994: the results folder and the result
    file of each seed."""
    out = tmp_path_factory.mktemp("clean")
    result = invoke("run", "--out", str(out), *RUN, "--seeds", "1993,1994")
    assert result.exit_code == 0, result.output
    files = {results.load(p)["seed"]: p for p in out.glob("runs/synthetic/simplecil/*.json")}
    assert sorted(files) == [1993, 1994]
    return out, files


def edited(change: Callable[[dict], None]) -> Callable[[str], str]:
    """A damage that edits the parsed record and writes it back as JSON."""

    def damage(text: str) -> str:
        record = json.loads(text)
        change(record)
        return json.dumps(record)

    return damage


def _set(path: tuple, value) -> Callable[[dict], None]:
    def change(record: dict) -> None:
        target = record
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


# name -> (damage of the clean file's text, the reason status and report give)
DAMAGES: dict[str, tuple[Callable[[str], str], str]] = {
    "json list": (lambda text: "[1, 2, 3]\n", "a JSON list, not a result record"),
    "stub": (lambda text: '{"status": "done"}', "no schema_version (this cl-bench writes 2)"),
    "stub with schema": (
        lambda text: '{"schema_version": 1, "status": "done"}',
        "missing keys: method, scenario, seed, config, class_order",
    ),
    "string for a number": (
        edited(_set(("acc_matrix", 2, 1), "abc")),
        "acc_matrix[2][1] is 'abc', not a number",
    ),
    "nan": (edited(_set(("avg_acc",), math.nan)), "avg_acc is nan, not a finite number"),
    "truncated": (lambda text: text[: len(text) // 2], "not valid JSON ("),
    "empty": (lambda text: "", "empty file"),
    "not json": (lambda text: "seed,avg\n1993,96.3\n", "not valid JSON (Expecting value"),
    "schema 3": (
        edited(_set(("schema_version",), 3)),
        "schema_version is 3, not one this cl-bench reads (1, 2; it writes 2)",
    ),
    "schema 1 layout as 2": (
        edited(_set(("protocol",), {"name": "fair", "selection": None})),
        "protocol.settings is None, not an object",
    ),
    "protocol label": (
        edited(_set(("protocol", "label"), "batchwise")),
        "protocol.label is 'batchwise', not a list of texts",
    ),
    "over 100": (
        edited(_set(("acc_seen", 0), 101.0)),
        "acc_seen[0] is 101.0, not a percentage in [0, 100]",
    ),
}


@pytest.fixture(params=list(DAMAGES))
def damaged(request, clean, tmp_path) -> tuple[Path, Path, str]:
    """A copy of the clean folder whose seed-1994 file is damaged: (folder, that file,
    the reason expected)."""
    out, files = clean
    copy = tmp_path / "res"
    shutil.copytree(out, copy)
    path = copy / files[1994].relative_to(out)
    damage, why = DAMAGES[request.param]
    path.write_text(damage(path.read_text()))
    return copy, path, why


def test_a_clean_run_is_valid(clean):
    _, files = clean
    for path in files.values():
        assert problems(results.load(path), path) == []
        assert results.is_done(path)


def test_a_clean_run_records_simplecils_declared_protocol(clean):
    """Schema 2: the protocol block holds the settings SimpleCIL declares (only the
    evaluation batch size), their meanings and the label (empty: no rule per batch)."""
    record = results.load(clean[1][1993])
    assert record["schema_version"] == 2
    protocol = record["protocol"]
    assert protocol["settings"] == {"eval_batch_size": 128}
    assert list(protocol["meanings"]) == ["eval_batch_size"]
    assert (
        protocol["name"],
        protocol["test_shuffle"],
        protocol["per_batch"],
        protocol["label"],
    ) == ("fair", True, False, [])


def test_a_schema_1_record_is_read_and_reused(clean, tmp_path):
    """A record written by schema 1 (four fixed protocol keys, null where the method has
    none) is valid, reads as schema 2 with the same protocol, and `run` reuses it."""
    out, files = clean
    copy = tmp_path / "res"
    shutil.copytree(out, copy)
    path = copy / files[1993].relative_to(out)
    new = results.load(path)
    old = {
        **new,
        "schema_version": 1,
        "protocol": {
            "name": "fair",
            "selection": None,
            "batchwise": None,
            "augment_views": None,
            "test_shuffle": True,
            "eval_batch_size": 128,
        },
    }
    path.write_text(json.dumps(old))
    assert problems(old, path) == []
    assert results.load_valid(path) == new
    assert (
        Result.from_dict(old, path)
        == Result.from_file(path)
        == dataclasses.replace(Result.from_file(files[1993]), path=path)
    )
    result = invoke("run", "--out", str(copy), *RUN, "--seeds", "1993")
    assert result.exit_code == 0, result.output
    assert "skip simplecil seed 1993: finished" in result.stdout
    assert results.load(path) == old  # read as schema 2, never rewritten


def test_run_recomputes_a_damaged_file_to_the_clean_numbers(damaged, clean):
    out, path, _ = damaged
    assert not results.is_done(path)
    result = invoke("run", "--out", str(out), *RUN, "--seeds", "1993,1994")
    assert result.exit_code == 0, result.output
    assert "skip simplecil seed 1993: finished" in result.stdout
    assert "  simplecil seed 1994: avg 9" in result.stdout  # computed again
    again, before = results.load_valid(path), results.load(clean[1][1994])
    assert {k: again[k] for k in NUMBERS} == {k: before[k] for k in NUMBERS}
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(  # replaced, no temp left
        [f"{p.name}{s}" for p in clean[1].values() for s in ("", ".lock")]
    )


def test_status_names_the_invalid_file_and_why(damaged):
    out, path, why = damaged
    result = invoke("status", "--results", str(out))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    (row,) = [line for line in lines if line.split()[2:4] == ["1994", path.stem[5:]]]
    assert row.split()[:5] == ["synthetic", "simplecil", "1994", path.stem[5:], "invalid"]
    assert why in row and "Traceback" not in result.output
    assert lines[-1] == "2 runs: 1 done, 0 running, 0 failed, 1 invalid, 0 pending"


def test_report_skips_the_invalid_file_with_a_warning(damaged, tmp_path):
    out, path, why = damaged
    result = invoke(
        "report",
        "--results",
        str(out),
        "--out",
        str(tmp_path / "r"),
        "--format",
        "csv,md",
        "--images",
        "none",
    )
    assert result.exit_code == 0, result.output
    warnings = result.stderr.splitlines()
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: skipped {path}: ")
    assert why in warnings[0]
    runs = pd.read_csv(tmp_path / "r" / "runs.csv")
    assert set(runs["seed"]) == {1993} and set(runs["method"]) == {"simplecil"}
    assert "| simplecil | n=1 |" in (tmp_path / "r" / "report.md").read_text()


def test_report_of_only_invalid_files_says_why(clean, tmp_path):
    out, files = clean
    copy = tmp_path / "res"
    shutil.copytree(out, copy)
    for path in files.values():
        (copy / path.relative_to(out)).write_text("[]")
    result = invoke("report", "--results", str(copy), "--out", str(tmp_path / "r"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "No finished runs" in result.stderr
    assert "2 result file(s) are not valid records" in result.stderr
    assert "a JSON list, not a result record" in result.stderr
    assert not (tmp_path / "r").exists()


def test_a_file_named_like_no_run_is_invalid(clean, tmp_path):
    """A foreign JSON file in a method folder, and a record copied to another seed's name."""
    out, files = clean
    copy = tmp_path / "res"
    shutil.copytree(out, copy)
    folder = copy / files[1993].parent.relative_to(out)
    (folder / "notes.json").write_text('{"todo": "more seeds"}')
    record = results.load(files[1993])
    moved = folder / f"7-{results.config_hash(record['config'])}.json"
    moved.write_text(json.dumps(record))
    assert problems(record, moved) == [
        f"seed is 1993 but the file is named {moved.name} (<seed>-<config hash>.json)"
    ]
    result = invoke("status", "--results", str(copy))
    assert result.exit_code == 0, result.output
    assert "no schema_version (this cl-bench writes 2)" in result.stdout
    assert result.stdout.splitlines()[-1] == (
        "4 runs: 2 done, 0 running, 0 failed, 2 invalid, 0 pending"
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_set(("status",), "running"), "status is 'running', not 'done'"),
        (_set(("method",), "tosca"), "method is 'tosca' but the file lies in folder 'simplecil'"),
        (_set(("seed",), True), "seed is True, not an integer"),
        (
            _set(("acc_matrix", 1), [50.0]),
            "acc_matrix[1] has 1 entries, not 2 (tasks 0..1, after training task 1)",
        ),
        (lambda r: r["acc_matrix"].pop(), "acc_matrix has 4 entries, not 5 (one per task)"),
        (lambda r: r["acc_seen"].pop(), "acc_seen has 4 entries, not 5 (one per task)"),
        (_set(("acc_seen", 2), math.inf), "acc_seen[2] is inf, not a finite number"),
        (_set(("last_acc",), 12.5), "last_acc is 12.5 but acc_seen and acc_matrix give "),
        (_set(("forgetting",), None), "forgetting is None but acc_seen and acc_matrix give "),
        (_set(("bwt",), "-3"), "bwt is '-3', not a number"),
        (_set(("acc_task_mean",), [50.0]), "acc_task_mean is [50.0] but acc_seen and acc_matrix "),
        (_set(("tasks", 0), [2, 4]), "tasks, joined, are not class_order"),
        (
            _set(("accounting", "stored_at_end"), "x"),
            "accounting.stored_at_end is 'x', not a number",
        ),
        (lambda r: r["timing"].pop("train_s"), "timing.train_s is missing"),
        (_set(("timing", "eval_s", 1), None), "timing.eval_s[1] is None, not a number"),
        (_set(("protocol",), []), "protocol is list, not an object"),
    ],
)
def test_each_problem_is_named(clean, change, problem):
    path = clean[1][1993]
    record = results.load(path)
    change(record)
    assert [p for p in problems(record, path) if p.startswith(problem)] != [], problem


def test_problems_of_several_fields_are_all_named(clean):
    path = clean[1][1993]
    record = results.load(path)
    record["acc_matrix"][2][1], record["avg_acc"] = "abc", math.nan
    record["accounting"]["stored_at_end"] = None
    found = problems(record, path)
    assert found == [
        "acc_matrix[2][1] is 'abc', not a number",
        "avg_acc is nan, not a finite number",
        "accounting.stored_at_end is None, not a number",
    ]
    assert reason(found + ["x"]) == "; ".join(found) + " (and 1 more)"


def test_a_changed_setting_no_longer_matches_the_file_name(clean):
    path = clean[1][1993]
    record = results.load(path)
    record["config"]["method"]["extra"] = 1
    assert problems(record, path) == [
        f"config hashes to {results.config_hash(record['config'])}, not to the "
        f"{path.stem[5:]} of the file name {path.name}"
    ]


def test_repeated_methods_and_seeds_are_one_run(tmp_path):
    assert RunRequest(methods=["tosca", "simplecil", "tosca"], seeds=[2, 1, 2]).methods == [
        "tosca",
        "simplecil",
    ]
    assert RunRequest(methods=["a"], seeds=[2, 1, 2, 1]).seeds == [2, 1]
    result = invoke(
        "run",
        "--out",
        str(tmp_path),
        "--scenario",
        "synthetic",
        "--no-progress",
        "--methods",
        "simplecil,simplecil",
        "--seeds",
        "1993,1993",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.count("simplecil seed 1993: avg") == 1
    assert "seeds 1993, " in result.stdout and "seeds 1993, 1993" not in result.stdout
    (grid,) = (tmp_path / "runs" / "_grids").glob("*.json")
    assert len(json.loads(grid.read_text())["runs"]) == 1
    row = next(line for line in result.stdout.splitlines() if line.startswith("simplecil "))
    assert row.split()[:3] == ["simplecil", "synthetic", "1"]


def test_summary_counts_each_run_once(clean):
    first, second = (Result.from_file(p) for p in clean[1].values())
    once = summary_table([first])
    assert summary_table([first, first, Result.from_file(first.path)]) == once
    row = next(line for line in once.splitlines() if line.startswith("simplecil"))
    assert row.split()[2:4] == ["1", f"{first.avg_acc:.2f}"]
    both = summary_table([first, second, first])
    row = next(line for line in both.splitlines() if line.startswith("simplecil"))
    assert row.split()[2] == "2"
