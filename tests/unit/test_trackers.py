"""The trackers' metrics, configuration and folders (cl_bench.engine.trackers), on fixed
numbers: what is sent after a task and at the end, and that a failing tracker is left
out without costing the run."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from cl_bench.engine import trackers
from cl_bench.engine.trackers import Tracking
from cl_bench.errors import UserError

MATRIX = [[100.0], [90.0, 80.0], [85.0, 75.0, 60.0]]
SEEN = [100.0, 85.0, 73.0]


def test_task_metrics_are_the_last_row_and_the_running_mean():
    assert trackers.task_metrics(MATRIX, SEEN) == {
        "acc_seen": 73.0,
        "avg_acc": (100.0 + 85.0 + 73.0) / 3,
        "acc_task_1": 85.0,
        "acc_task_2": 75.0,
        "acc_task_3": 60.0,
    }
    assert trackers.task_metrics(MATRIX[:1], SEEN[:1]) == {
        "acc_seen": 100.0,
        "avg_acc": 100.0,
        "acc_task_1": 100.0,
    }


def test_final_metrics_take_the_record_numbers_that_are_set():
    record = {
        "avg_acc": 86.0,
        "last_acc": 73.0,
        "forgetting": None,  # a single task: not sent
        "bwt": -10,
        "accounting": {
            "added_per_task": [5, 7],
            "stored_at_end": 12,
            "inference_gflops_per_image": 0.5,
        },
        "timing": {"train_s": 1.25},
    }
    assert trackers.final_metrics(record) == {
        "final/avg_acc": 86.0,
        "final/last_acc": 73.0,
        "final/bwt": -10.0,
        "final/added_params": 7.0,
        "final/stored_params": 12.0,
        "final/gflops": 0.5,
        "final/train_s": 1.25,
    }


def test_config_is_flattened_to_dotted_keys():
    config = {"method": {"name": "tosca", "lr": 0.01, "milestones": [1, 2]}, "data": "abc"}
    assert trackers.flatten(config) == {
        "method.name": "tosca",
        "method.lr": "0.01",
        "method.milestones": "[1, 2]",
        "data": "abc",
    }


def test_log_folder_mirrors_the_result_file():
    result = Path("/r/runs/synthetic/tosca/1993-abc123.json")
    assert trackers.log_folder(result) == Path("/r/logs/synthetic/tosca/1993-abc123")


def test_unknown_or_missing_trackers_are_refused(monkeypatch):
    with pytest.raises(UserError, match='Unknown --log tracker "tensorbord". Did you mean'):
        trackers.check_trackers(["tensorbord"])
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"--log mlflow needs the mlflow-skinny package"):
        trackers.check_trackers(["csv", "mlflow"])
    assert trackers.check_trackers(["csv", "csv"]) == ["csv"]  # csv needs nothing


class Kept:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def metrics(self, values, step):
        self.calls.append(("metrics", step, dict(values)))

    def config(self, flat):
        self.calls.append(("config", flat))

    def close(self):
        self.calls.append(("close",))


class Broken(Kept):
    def metrics(self, values, step):
        raise OSError("disk full")


def test_a_failing_tracker_is_left_out_and_the_others_go_on(capsys):
    kept, broken = Kept(), Broken()
    tracking = Tracking([broken, kept])
    tracking.task(MATRIX[:1], SEEN[:1])
    tracking.task(MATRIX[:2], SEEN[:2])
    tracking.finish({"acc_seen": SEEN[:2], "avg_acc": 92.5, "config": {"method": {"lr": 1}}})
    assert tracking.backends == [kept]
    assert kept.calls == [
        ("metrics", 1, {"acc_seen": 100.0, "avg_acc": 100.0, "acc_task_1": 100.0}),
        (
            "metrics",
            2,
            {"acc_seen": 85.0, "avg_acc": 92.5, "acc_task_1": 90.0, "acc_task_2": 80.0},
        ),
        ("metrics", 2, {"final/avg_acc": 92.5}),
        ("config", {"method.lr": "1"}),
        ("close",),
    ]
    err = capsys.readouterr().err
    assert err.count("warning: tracker Broken failed (OSError: disk full)") == 1


def test_csv_tracker_writes_a_long_table_and_the_config(tmp_path):
    backend = trackers.CsvBackend(tmp_path / "csv")
    Tracking([backend]).task(MATRIX[:2], SEEN[:2])
    backend.config({"method.lr": "0.1"})
    backend.close()
    with (tmp_path / "csv" / "metrics.csv").open() as f:
        rows = list(csv.reader(f))
    assert rows == [
        ["task", "name", "value"],
        ["2", "acc_seen", "85.0"],
        ["2", "avg_acc", "92.5"],
        ["2", "acc_task_1", "90.0"],
        ["2", "acc_task_2", "80.0"],
    ]
    assert (tmp_path / "csv" / "config.csv").read_text().splitlines() == [
        "key,value",
        "method.lr,0.1",
    ]


def test_a_tracker_that_cannot_start_is_left_out(tmp_path, capsys):
    """A logs folder that cannot be made (a file stands where it goes): the csv tracker
    is reported and left out at the start; a logger of the caller's own still counts."""
    result = tmp_path / "out" / "runs" / "synthetic" / "simplecil" / "1993-abc.json"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "logs").write_text("not a folder")
    kept = Kept()
    tracking = trackers.open_trackers(["csv"], result, [kept])
    assert [type(b).__name__ for b in tracking.backends] == ["AvalancheBackend"]
    assert "warning: tracker csv failed (NotADirectoryError" in capsys.readouterr().err
