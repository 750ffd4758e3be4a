"""The Python API: `cl_bench.run` gives the same runs as `cl-bench run` (same files, same
numbers) and skips finished ones; `load_results` and `report` read a results folder as
the CLI does; typed records come from validated files only; `import cl_bench` is cheap."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import cl_bench
from cl_bench import api
from cl_bench.errors import UserError
from cl_bench.store.records import InvalidResult, Result
from tests.helpers.cli import invoke

METHODS = ["simplecil", "tosca"]
SETTINGS = {"tosca.epochs": 1}
CLI = [
    "--scenario",
    "synthetic",
    "--no-progress",
    "--methods",
    "simplecil,tosca",
    "--set",
    "tosca.epochs=1",
]


def files_of(out: Path) -> dict[str, dict]:
    """Result files under ``out`` (path relative to it -> record)."""
    return {
        str(p.relative_to(out)): json.loads(p.read_text())
        for p in sorted(out.glob("runs/*/*/*.json"))
    }


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> tuple[Path, list[Result], list[str]]:
    """SimpleCIL and TOSCA (1 epoch) on `synthetic` through the API: the folder, the
    results and the lines it printed."""
    out = tmp_path_factory.mktemp("api")
    lines: list[str] = []
    done = cl_bench.run(
        METHODS, scenario="synthetic", seeds=[1993], out=out, settings=SETTINGS, echo=lines.append
    )
    return out, done, lines


def test_run_returns_the_result_files(ran):
    out, done, lines = ran
    assert [type(r) for r in done] == [Result, Result]
    assert [r.method for r in done] == METHODS
    records = files_of(out)
    assert sorted(str(r.path.relative_to(out)) for r in done) == sorted(records)
    for r in done:
        record = records[str(r.path.relative_to(out))]
        assert r.path.name == f"1993-{r.config_hash}.json"
        assert (r.scenario, r.seed, r.status, r.protocol_name) == (
            "synthetic",
            1993,
            "done",
            "fair",
        )
        assert r.acc_matrix == record["acc_matrix"] and r.acc_seen == record["acc_seen"]
        assert (r.avg_acc, r.last_acc, r.forgetting, r.bwt) == (
            record["avg_acc"],
            record["last_acc"],
            record["forgetting"],
            record["bwt"],
        )
        assert r.config == record["config"] and r.timing == record["timing"]
        assert r.train_s == sum(record["timing"]["train_s"])
        assert r == Result.from_file(r.path)
    tosca = done[1]
    assert tosca.config["method"]["epochs"] == 1
    assert tosca.protocol_settings["selection"] == "sample"
    assert tosca.added_params == 413_520 + 2 * 1280
    assert f"  tosca seed 1993: avg {tosca.avg_acc:.2f}  last {tosca.last_acc:.2f}" in "\n".join(
        lines
    )


def test_the_cli_makes_the_same_runs(ran, tmp_path):
    out, done, _ = ran
    result = invoke("run", "--out", str(tmp_path), *CLI)
    assert result.exit_code == 0, result.output
    api_files, cli_files = files_of(out), files_of(tmp_path)
    assert sorted(cli_files) == sorted(api_files)  # same config hashes
    for name, record in cli_files.items():
        for key in ("acc_matrix", "acc_seen", "avg_acc", "last_acc", "routing_acc", "config"):
            assert record[key] == api_files[name][key], key
    again = invoke("run", "--out", str(out), *CLI)  # the CLI finds the API's runs finished
    assert again.exit_code == 0 and again.stdout.count("skip") == 2


def test_a_second_call_skips_finished_runs(ran):
    out, done, _ = ran
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/*/*.json")}
    lines: list[str] = []
    again = cl_bench.run(
        METHODS, scenario="synthetic", seeds=1993, out=out, settings=SETTINGS, echo=lines.append
    )
    assert again == done
    assert [line for line in lines if line.startswith("  ")] == [
        f"  skip {r.method} seed 1993: finished ({r.path})" for r in done
    ]
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/*/*.json")} == stamps


def test_settings_are_the_command_lines_set():
    assert api.settings_as_sets(
        {
            "tosca.epochs": 3,
            "tosca.selection": "batch",
            "tosca.lr": "0.01",
            "scenario.test_shuffle": False,
            "tosca.x": None,
            "scenario.dataset_args": {"n": [1, 2]},
        }
    ) == [
        "tosca.epochs=3",
        "tosca.selection=batch",
        "tosca.lr=0.01",
        "scenario.test_shuffle=false",
        "tosca.x=null",
        'scenario.dataset_args={"n": [1, 2]}',
    ]
    with pytest.raises(UserError, match="is not a number, bool, None, string, list or dict"):
        api.settings_as_sets({"tosca.lr": object()})


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"settings": {"tosca.lrr": 0.1}}, '"tosca" has no setting "lrr". Did you mean "lr"?'),
        ({"settings": {"tosca.lr": "fast"}}, "expected a float"),
        ({"settings": {"epochs": 1}}, "not of the form owner.key=value"),
        ({"seeds": []}, "--seeds is empty"),
        ({"seeds": ["1993"]}, "seeds must be integers"),
        ({"methods": []}, '--methods "" names no method'),
        ({"methods": ["tosac"]}, 'Unknown method "tosac". Did you mean "tosca"?'),
        ({"scenario": "fminst"}, 'Unknown scenario "fminst". Did you mean "fmnist"?'),
    ],
)
def test_bad_input_raises_user_error_and_writes_nothing(tmp_path, kwargs, needle):
    args = {
        "methods": ["tosca"],
        "scenario": "synthetic",
        "out": tmp_path / "out",
        "echo": None,
    } | kwargs
    with pytest.raises(UserError) as e:
        cl_bench.run(**args)
    assert needle in e.value.paragraph()
    assert not (tmp_path / "out").exists()


def test_load_results_one_row_per_run(ran):
    out, done, _ = ran
    runs = cl_bench.load_results(out)
    assert len(runs) == 2 and list(runs["method"]) == METHODS
    assert {
        "scenario",
        "method",
        "seed",
        "config",
        "protocol",
        "backbone",
        "weights",
        "avg_acc",
        "last_acc",
        "forgetting",
        "added_params",
        "stored_params",
        "gflops",
        "train_s",
        "acc_seen",
        "acc_matrix",
        "file",
        "label",
    } <= set(runs.columns)
    for row, r in zip(runs.itertuples(), done, strict=True):
        assert (row.config, row.avg_acc, row.last_acc, row.acc_matrix) == (
            r.config_hash,
            r.avg_acc,
            r.last_acc,
            r.acc_matrix,
        )
        assert (row.file, row.protocol, row.backbone, row.weights) == (
            str(r.path.relative_to(out)),
            "fair",
            "efficientnet_lite0",
            "pretrained",
        )
    assert list(runs["label"]) == ["simplecil", "tosca (selection=sample)"]
    assert list(cl_bench.load_results(out, methods=["tosca"])["method"]) == ["tosca"]


def test_an_invalid_file_is_skipped_with_one_warning(ran, tmp_path):
    out, done, _ = ran
    copy = tmp_path / "res"
    shutil.copytree(out, copy)
    damaged = copy / done[1].path.relative_to(out)
    damaged.write_text(damaged.read_text()[:100])
    with pytest.warns(api.SkippedResultWarning) as caught:
        runs = cl_bench.load_results(copy)
    (warning,) = caught
    assert str(warning.message).startswith(f"skipped {damaged}: not valid JSON (")
    assert str(warning.message).endswith("), e.g. a write cut short")
    assert list(runs["method"]) == ["simplecil"]
    with pytest.raises(InvalidResult, match="^not valid JSON"):
        Result.from_file(damaged)


def test_report_writes_the_files_it_returns(ran, tmp_path):
    out, _, _ = ran
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped
        written = cl_bench.report(out, tmp_path / "r", formats=["md", "csv"], images=())
    names = ["paired.csv", "report.md", "runs.csv"]  # paired.csv: the paired statistics
    assert written == [tmp_path / "r" / name for name in names]
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == names
    assert "| tosca (selection=sample) | n=1 |" in written[1].read_text()
    with pytest.raises(UserError, match='Unknown report format "pdf"'):
        cl_bench.report(out, tmp_path / "r2", formats="pdf")


def test_records_are_validated(ran):
    _, done, _ = ran
    record = json.loads(done[0].path.read_text())
    assert Result.from_dict(record).path is None
    assert Result.from_dict(record) == dataclasses.replace(done[0], path=None)
    with pytest.raises(InvalidResult, match="seed is 1993 but the file is named 1994-"):
        Result.from_dict(record, done[0].path.with_name(f"1994-{done[0].config_hash}.json"))
    with pytest.raises(InvalidResult, match="^avg_acc is 'x', not a number$"):
        Result.from_dict({**record, "avg_acc": "x"})
    named = {**record, "protocol": {**record["protocol"], "name": "paper"}}
    with pytest.raises(
        InvalidResult, match="protocol.name is 'paper' but the config was run under 'fair'"
    ):
        Result.from_dict(named)
    paper = Result.from_dict({**named, "config": {**record["config"], "protocol": "paper"}})
    assert (paper.protocol_name, done[0].protocol_name) == ("paper", "fair")
    with pytest.raises(FileNotFoundError):
        Result.from_file(done[0].path.with_name("1993-0000000000.json"))


def test_import_is_cheap():
    code = (
        "import sys, cl_bench; cl_bench.run; cl_bench.Result; cl_bench.load_results; "
        "print(sorted(m for m in ('torch', 'avalanche', 'pandas', 'timm') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_scenario_export():
    if importlib.util.find_spec("cl_bench.scenarios.avalanche") is not None:
        assert callable(cl_bench.scenario)
        return
    with pytest.raises(
        ImportError, match="cl_bench.scenario needs the module cl_bench.scenarios.avalanche"
    ):
        cl_bench.scenario  # noqa: B018


def test_run_grid_runs_a_local_grid_beside_the_runs_of_run(ran):
    """A local grid through the API: the finished seed is skipped (the same identity as
    `cl_bench.run`'s), the missing one runs in a worker process, both come back."""
    out, done, _ = ran
    lines: list[str] = []
    grid = cl_bench.run_grid(
        ["simplecil"], scenario="synthetic", seeds=[1993, 1994], out=out, jobs=1, echo=lines.append
    )
    assert grid.counts() == "2 done" and grid.unfinished == 0
    assert [(r.method, r.seed) for r in grid.results] == [("simplecil", 1993), ("simplecil", 1994)]
    assert grid.results[0].path == done[0].path and grid.results[0].acc_matrix == done[0].acc_matrix
    assert any(line.startswith("  skip synthetic/simplecil seed 1993: finished") for line in lines)
    assert "running 1 runs in 1 local worker processes, torch threads per worker: 2" in lines
    with pytest.raises(UserError, match="--jobs must be at least 1"):
        cl_bench.run_grid(["simplecil"], scenario="synthetic", out=out, jobs=0)
    with pytest.raises(UserError, match="--launcher local takes --jobs N"):
        cl_bench.run_grid(["simplecil"], scenario="synthetic", out=out, slurm_time=10)


SUITE = """
runs:
  - name: api
    scenario: synthetic
    methods: [simplecil, tosca]
    sets: [tosca.epochs=1]
"""


def test_check_runs_the_gate_on_finished_runs(ran, tmp_path):
    """The gate through the API: a baseline written from the suite's runs (those of
    `cl_bench.run`, reused), then compared with it, then failed by a raised baseline."""
    out, done, _ = ran
    cards, base = tmp_path / "cards", tmp_path / "base.json"
    cards.mkdir()
    (cards / "apisuite.yaml").write_text(SUITE)
    lines: list[str] = []
    with api.cards([cards]):
        made = cl_bench.check(
            "apisuite", out=out, baseline=base, update_baseline=True, echo=lines.append
        )
        assert made.written and made.rows == [] and made.baseline == base
        gate = cl_bench.check("apisuite", out=out, baseline=base, echo=lines.append)
        assert gate.passed and not gate.improved
        assert [(r.key, r.metric, r.now, r.status) for r in gate.rows] == [
            (f"api/{r.method}", m, getattr(r, m), "ok")
            for r in done
            for m in ("avg_acc", "last_acc")
        ]
        assert "check passed" not in gate.table() and "api/tosca" in gate.table()
        raised = json.loads(base.read_text())
        raised["metrics"]["api/tosca"]["last_acc"]["value"] += 5.0
        base.write_text(json.dumps(raised))
        failed = cl_bench.check("apisuite", out=out, baseline=base, echo=None)
        assert [(r.key, r.metric, r.status) for r in failed.failed] == [
            ("api/tosca", "last_acc", "DROP")
        ]
        assert not failed.passed
        with pytest.raises(UserError, match="tolerance"):
            cl_bench.check("apisuite", out=out, baseline=base, tolerance=-1.0)
    assert sum("skip" in line and "finished" in line for line in lines) == 4
    with pytest.raises(UserError, match='Unknown suite "apisuite"'):
        cl_bench.check("apisuite", out=out, baseline=base)


def test_run_grid_refuses_a_misspelt_keyword_by_name():
    with pytest.raises(UserError, match="unknown keyword 'precison'. Did you mean \"precision\""):
        cl_bench.run_grid("simplecil", "synthetic", precison="fp32")
