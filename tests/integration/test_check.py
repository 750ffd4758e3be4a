"""`cl-bench check`: the accuracy regression gate against a committed baseline."""

from __future__ import annotations

import json

import pytest

from cl_bench.cards import catalogue
from cl_bench.gate import compare as gate_compare
from cl_bench.gate import suite as gate_suite
from tests.helpers.cli import invoke

SUITE = """
name: mini
threads: 2
runs:
  - name: synth
    scenario: synthetic
    backbone: efficientnet_lite0
    image_size: 64
    precision: fp32
    methods: [simplecil, tosca]
    sets: [tosca.epochs=2]
"""


@pytest.fixture()
def suite_dir(tmp_path, monkeypatch):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    for name in catalogue.scenario_names():
        (bench / f"{name}.yaml").write_text((catalogue.BENCHMARKS_DIR / f"{name}.yaml").read_text())
    (bench / "mini.yaml").write_text(SUITE)
    monkeypatch.setattr(catalogue, "BENCHMARKS_DIR", bench)
    return tmp_path


def check(tmp, *args: str):
    return invoke(
        "check",
        "--suite",
        "mini",
        "--baseline",
        str(tmp / "base.json"),
        "--out",
        str(tmp / "out"),
        "--no-progress",
        *args,
    )


def test_update_then_pass_then_fail_on_raised_baseline_and_missing(suite_dir):
    made = check(suite_dir, "--update-baseline")
    assert made.exit_code == 0, made.output
    base = json.loads((suite_dir / "base.json").read_text())
    assert set(base["metrics"]) == {"synth/simplecil", "synth/tosca"}
    assert (
        base["provenance"]["torch"]
        and base["metrics"]["synth/tosca"]["avg_acc"]["tolerance"] == 1.0
    )
    assert {"commit", "date", "torch", "timm", "avalanche", "device"} <= set(base["provenance"])

    ok = check(suite_dir)
    assert ok.exit_code == 0, ok.output
    assert "check passed" in ok.stdout and ok.stdout.count(" ok") == 4
    assert ok.stdout.count("skip") == 2  # finished runs in --out are reused

    raised = json.loads((suite_dir / "base.json").read_text())
    raised["metrics"]["synth/tosca"]["last_acc"]["value"] += 5.0
    (suite_dir / "base.json").write_text(json.dumps(raised))
    drop = check(suite_dir)
    assert drop.exit_code == 1
    assert "FAILED: synth/tosca last_acc DROP" in drop.stdout

    lowered = json.loads((suite_dir / "base.json").read_text())
    lowered["metrics"]["synth/tosca"]["last_acc"]["value"] -= 10.0
    (suite_dir / "base.json").write_text(json.dumps(lowered))
    better = check(suite_dir)
    assert better.exit_code == 0 and "IMPROVED" in better.stdout
    assert "update the baseline" in better.stdout

    lowered["metrics"]["synth/l2p"] = lowered["metrics"]["synth/tosca"]
    (suite_dir / "base.json").write_text(json.dumps(lowered))
    missing = check(suite_dir)
    assert missing.exit_code == 1 and "synth/l2p avg_acc MISSING" in missing.stdout


def test_two_runs_of_a_suite_give_identical_numbers(suite_dir, tmp_path_factory, monkeypatch):
    first = check(suite_dir, "--update-baseline")
    assert first.exit_code == 0
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path_factory.mktemp("cold_cache")))
    second = invoke(
        "check",
        "--suite",
        "mini",
        "--baseline",
        str(suite_dir / "base.json"),
        "--out",
        str(suite_dir / "out2"),
        "--no-progress",
        "--tolerance",
        "0",
    )
    assert second.exit_code == 0, second.output
    a = sorted((suite_dir / "out").glob("runs/*/*/*.json"))
    b = sorted((suite_dir / "out2").glob("runs/*/*/*.json"))
    assert [p.name for p in a] == [p.name for p in b]
    for x, y in zip(a, b, strict=True):
        rx, ry = json.loads(x.read_text()), json.loads(y.read_text())
        assert rx["acc_matrix"] == ry["acc_matrix"] and rx["acc_seen"] == ry["acc_seen"]


def test_compare_rules():
    base = {
        "metrics": {
            "a/m": {
                "avg_acc": {"value": 50.0, "tolerance": 1.0},
                "last_acc": {"value": 40.0, "tolerance": 0.5},
            }
        }
    }
    rows = gate_compare.compare(base, {"a/m": {"avg_acc": 49.2, "last_acc": 39.4}}, None)
    assert [r.status for r in rows] == ["ok", "DROP"]
    rows = gate_compare.compare(base, {"a/m": {"avg_acc": 49.2, "last_acc": 39.4}}, 2.0)
    assert [r.status for r in rows] == ["ok", "ok"]
    rows = gate_compare.compare(base, {"b/m": {"avg_acc": 1.0, "last_acc": 1.0}}, None)
    assert {(r.key, r.status) for r in rows} == {("a/m", "MISSING"), ("b/m", "NEW")}


def test_a_value_per_cpu_capability():
    """Fine-tuning is deterministic per instruction set: a baseline value recorded for
    this CPU's capability is compared at tolerance 0; other CPUs use the main value."""
    base = {
        "metrics": {
            "a/m": {
                "avg_acc": {"value": 26.21, "tolerance": 1.0, "by_cpu": {"AVX2": 25.30}},
                "last_acc": {"value": 12.6, "tolerance": 1.0},
            }
        }
    }
    now = {"a/m": {"avg_acc": 25.30, "last_acc": 12.6}}
    rows = gate_compare.compare(base, now, 0.0, cpu="AVX2")
    assert [(r.baseline, r.status) for r in rows] == [(25.30, "ok"), (12.6, "ok")]
    rows = gate_compare.compare(base, now, 0.0, cpu="AVX512")
    assert [(r.baseline, r.status) for r in rows] == [(26.21, "DROP"), (12.6, "ok")]
    assert gate_compare.cpu_capability() in {
        "DEFAULT",
        "AVX2",
        "AVX512",
        "ZVECTOR",
        "VSX",
        "SVE256",
    }


def test_unknown_suite_is_exit_2():
    result = invoke("check", "--suite", "nope")
    assert result.exit_code == 2 and 'Unknown suite "nope"' in result.stderr


def test_an_invalid_suite_run_is_run_again(suite_dir):
    """A result whose last_acc no longer matches its accuracies (hand-edited, damaged) is
    not a finished run: check computes it again instead of comparing the edited number."""
    made = check(suite_dir, "--update-baseline")
    assert made.exit_code == 0, made.output
    (tosca,) = (suite_dir / "out").glob("runs/synthetic/tosca/*.json")
    clean = json.loads(tosca.read_text())
    tosca.write_text(json.dumps({**clean, "last_acc": 0.0}))
    again = check(suite_dir, "--tolerance", "0")
    assert again.exit_code == 0, again.output
    assert again.stdout.count("skip") == 1 and "  tosca seed 1993: avg" in again.stdout
    assert "check passed" in again.stdout and again.stdout.count(" ok") == 4
    again_record = json.loads(tosca.read_text())
    assert [again_record[k] for k in ("acc_matrix", "acc_seen", "last_acc")] == [
        clean[k] for k in ("acc_matrix", "acc_seen", "last_acc")
    ]


def test_each_side_says_where_it_ran():
    """A value measured under another capability or precision is compared with its
    tolerance, and the row and a note say where each side ran."""
    base = {
        "provenance": {
            "cpu_capability": "AVX512",
            "precision": {"a/m": "fp32"},
            "torch": "2.14.1+cu130",
            "timm": "0.6.12",
            "avalanche": "0.6.0",
        },
        "metrics": {
            "a/m": {
                "avg_acc": {"value": 26.2, "tolerance": 1.0, "by_cpu": {"AVX2": 25.3}},
                "last_acc": {"value": 12.6, "tolerance": 1.0},
            },
            "b/m": {
                "avg_acc": {"value": 80.0, "tolerance": 1.0},
                "last_acc": {"value": 70.0, "tolerance": 1.0},
            },
        },
    }
    suite = {"runs": [{"name": "a", "precision": "fp32"}, {"name": "b", "precision": "auto"}]}
    now = gate_suite.Measured(
        values={
            "a/m": {"avg_acc": 25.3, "last_acc": 13.0},
            "b/m": {"avg_acc": 80.5, "last_acc": 70.0},
        },
        precision={"a/m": "fp32", "b/m": "bf16"},
        packages={"torch": "2.14.1", "timm": "1.0.31", "numpy": "2.4.6"},
    )
    rows = gate_compare.compare(base, now, None, cpu="AVX2", suite=suite)
    assert [(r.key, r.metric, r.baseline, r.status, r.ran_in) for r in rows] == [
        ("a/m", "avg_acc", 25.3, "ok", "AVX2/fp32"),  # its own by_cpu value
        ("a/m", "last_acc", 12.6, "ok", "AVX512/fp32 -> AVX2/fp32"),
        ("b/m", "avg_acc", 80.0, "ok", "AVX512/? -> AVX2/bf16"),  # suite says auto: unknown
        ("b/m", "last_acc", 70.0, "ok", "AVX512/? -> AVX2/bf16"),
    ]
    assert "ran in" in gate_compare.table(rows).splitlines()[0]
    notes = gate_compare.environment_notes(rows, base, now)
    assert notes[0].startswith(
        "3 baseline value(s) were measured under another CPU capability "
        "or precision (AVX512/? -> AVX2/bf16; AVX512/fp32 -> AVX2/fp32;"
    )
    assert notes[1].startswith(
        "Package versions differ from the baseline's (baseline / now, "
        "in sorted order): timm 0.6.12 / 1.0.31."
    )
    same = gate_suite.Measured(
        values=now.values,
        precision={"a/m": "fp32", "b/m": "fp32"},
        packages={"torch": "2.14.1", "timm": "0.6.12"},
    )
    base["provenance"]["precision"]["b/m"] = "fp32"
    rows = gate_compare.compare(base, same, None, cpu="AVX512", suite=suite)
    assert {r.ran_in for r in rows} == {"AVX512/fp32"}
    assert gate_compare.environment_notes(rows, base, same) == []


def test_a_malformed_provenance_only_loses_the_annotation():
    base = {
        "provenance": "lost",
        "metrics": {
            "a/m": {
                "avg_acc": {"value": 50.0, "tolerance": 1.0},
                "last_acc": {"value": 40.0, "tolerance": 1.0},
            }
        },
    }
    now = gate_suite.Measured(
        values={"a/m": {"avg_acc": 50.0, "last_acc": 38.0}},
        precision={"a/m": "fp32"},
        packages={"timm": "1.0.31"},
    )
    rows = gate_compare.compare(base, now, None, cpu="AVX2", suite={"runs": [{"name": "a"}]})
    assert [(r.status, r.ran_in) for r in rows] == [
        ("ok", "?/? -> AVX2/fp32"),
        ("DROP", "?/? -> AVX2/fp32"),
    ]
    assert len(gate_compare.environment_notes(rows, base, now)) == 1  # no package note
