"""A search record is checked when read back: ``run --tuned`` takes its settings."""

from __future__ import annotations

import json

import pytest

from cl_bench.errors import UserError
from cl_bench.tune.record import best_trial, problems, read_record


def _record(**changes) -> dict:
    trials = [
        {"number": 0, "params": {"lr": 0.01}, "value": 50.0, "state": "complete"},
        {"number": 1, "params": {"lr": 0.03}, "value": 61.5, "state": "complete"},
        {"number": 2, "params": {"lr": 0.05}, "value": None, "state": "failed"},
        {"number": 3, "params": {"lr": 0.02}, "value": 61.5, "state": "complete"},
    ]
    record = {
        "schema": 1, "method": "tosca", "scenario": "synthetic", "study": "abc",
        "objective": "avg", "validation": 0.1, "seeds": [1993],
        "space": [{"key": "lr", "low": 0.001, "high": 0.1, "log": True, "whole": False}],
        "sets": [], "setting": {}, "trials_wanted": 4, "trials": trials,
        "best": {"number": 1, "params": {"lr": 0.03}, "value": 61.5},
        "cost": {"updated": "2026-12-07T00:00:00+00:00"}, "test_split_read": False,
    }  # fmt: skip
    return {**record, **changes}


def test_the_best_is_the_highest_complete_trial_the_earliest_among_equals():
    assert best_trial(_record()["trials"])["number"] == 1
    assert problems(_record()) == []


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"best": {"number": 0, "params": {"lr": 0.01}, "value": 50.0}}, "trial 1 scores higher"),
        ({"test_split_read": True}, "test split unread"),
        ({"schema": 2}, "schema is 2"),
        ({"trials": [{"number": 0, "params": {}, "value": 1.0, "state": "complete"}]}, "exactly"),
    ],
)
def test_a_damaged_record_is_refused(tmp_path, changes, needle):
    assert any(needle in p for p in problems(_record(**changes)))
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(_record(**changes)))
    with pytest.raises(UserError, match="is not a valid search record"):
        read_record(path)
