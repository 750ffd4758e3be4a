"""End-to-end runs through the CLI and the bad-input contract (exit 2, one
paragraph, no traceback, nothing written)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import FAST, invoke
from tests.helpers.features import e2e_cache

SCHEMA = {
    "schema_version",
    "method",
    "scenario",
    "seed",
    "status",
    "config",
    "class_order",
    "class_names",
    "tasks",
    "protocol",
    "env",
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
    "timing",
    "memory",
    "created",
    "code",
}


def test_run_writes_complete_consistent_results(e2e_run):
    out, result, records = e2e_run
    assert result.exit_code == 0, result.output
    assert set(records) == {"tosca", "simplecil"}
    for r in records.values():
        assert SCHEMA <= set(r), SCHEMA - set(r)
        assert r["status"] == "done" and r["seed"] == 1993 and r["scenario"] == "synthetic"
        # seed 1993 permutation of 10 classes (PILOT convention), split into 5 tasks of 2
        assert r["class_order"] == [4, 2, 7, 6, 0, 3, 5, 8, 9, 1]
        assert r["tasks"] == [[4, 2], [7, 6], [0, 3], [5, 8], [9, 1]]
        assert [len(row) for row in r["acc_matrix"]] == [1, 2, 3, 4, 5]
        assert r["last_acc"] == r["acc_seen"][-1]
        assert r["avg_acc"] == pytest.approx(sum(r["acc_seen"]) / 5)
        # test sets are equal-sized per task here, so both conventions agree
        assert r["acc_task_mean"] == pytest.approx(r["acc_seen"])
        assert all(0 <= a <= 100 for row in r["acc_matrix"] for a in row)
        assert r["protocol"]["test_shuffle"] is True
        assert len(r["timing"]["train_s"]) == len(r["timing"]["eval_s"]) == 5
        assert r["memory"]["peak_rss_bytes"] > 0
        assert r["accounting"]["backbone_params"] == r["accounting"]["backbone_frozen"] > 4e6
        assert r["config"]["backbone"]["weights_digest"] == "579344248a93e230"
    tosca, simplecil = records["tosca"], records["simplecil"]
    assert tosca["protocol"]["settings"] == {
        "selection": "sample",
        "augment_views": 0,
        "eval_batch_size": 48,
    }
    assert len(tosca["routing_acc"]) == 5 and tosca["routing_acc"][0] == 100.0
    assert simplecil["routing_acc"] is None
    # synthetic classes are well separated: far above chance (10 %)
    assert simplecil["last_acc"] >= 80 and tosca["last_acc"] >= 50
    # one LuCA (1280-d, ratios 16) = 413,520 parameters + 2 new cosine rows of 1,280 per task
    assert tosca["accounting"]["added_per_task"][1:] == [413_520 + 2 * 1280] * 4
    assert simplecil["accounting"]["trainable_per_task"] == [0] * 5
    # the features were extracted once and shared by the second method
    assert simplecil["timing"]["features_from"] == "extracted"
    assert tosca["timing"]["features_from"] == "memory"
    assert "tosca [selection=sample]" in result.stdout


def test_rerun_skips_finished_runs(e2e_run):
    out, _, records = e2e_run
    files = sorted(out.glob("runs/*/*/*.json"))
    before = [p.stat().st_mtime_ns for p in files]
    result = invoke("run", "--out", str(out), *FAST)
    assert result.exit_code == 0, result.output
    assert result.stdout.count("skip") == 2
    assert [p.stat().st_mtime_ns for p in files] == before
    assert sorted(out.glob("runs/*/*/*.json")) == files


def test_same_command_same_numbers(e2e_run, tmp_path, tmp_path_factory, monkeypatch):
    """A second invocation reads the features from the disk cache: same numbers."""
    _, _, records = e2e_run
    monkeypatch.setenv("CL_BENCH_CACHE", str(e2e_cache(tmp_path_factory)))
    result = invoke("run", "--out", str(tmp_path), "--methods", "tosca", *FAST)
    assert result.exit_code == 0, result.output
    again = json.loads(next(tmp_path.glob("runs/*/tosca/*.json")).read_text())
    assert again["timing"]["features_from"] == "disk cache"
    assert again["acc_matrix"] == records["tosca"]["acc_matrix"]
    assert again["routing_acc"] == records["tosca"]["routing_acc"]


def test_changed_setting_is_a_new_run(e2e_run):
    out, _, _ = e2e_run
    result = invoke(
        "run", "--out", str(out), "--methods", "tosca", *FAST, "--set", "tosca.selection=batch"
    )
    assert result.exit_code == 0, result.output
    files = sorted(out.glob("runs/synthetic/tosca/*.json"))
    assert len(files) == 2
    batch = [
        json.loads(p.read_text())
        for p in files
        if json.loads(p.read_text())["protocol"]["settings"]["selection"] == "batch"
    ]
    assert len(batch) == 1 and batch[0]["config"]["method"]["selection"] == "batch"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--methods", "tosac"], 'Unknown method "tosac". Did you mean "tosca"?'),
        (["--scenario", "fminst"], 'Unknown scenario "fminst". Did you mean "fmnist"?'),
        (["--backbone", "efficientnet_lite"], 'Did you mean "efficientnet_lite0"?'),
        (["--set", "tosca.lrr=0.1"], '"tosca" has no setting "lrr". Did you mean "lr"?'),
        (["--set", "tosca.lr=fast"], "expected a float"),
        (["--set", "tosca.selection=oracle"], "choose one of sample, batch"),
        (["--set", "l2p.lr=0.1"], '"l2p" is neither "scenario" nor one of the methods'),
        (["--set", "tosca.lr"], "not of the form owner.key=value"),
        (["--seeds", "19x3"], "comma-separated integers"),
        (["--weights", "/nonexistent/w.pth"], "/nonexistent/w.pth"),
        (["--scenario", "fmnist-full", "--data-root", "/nonexistent"], "apt-get install"),
        (["--device", "cuda"], "no CUDA GPU"),
        (["--backbone", "vit_tiny_patch16_224"], "vit_tiny_patch16_224.augreg_in21k"),
        (["--methods", "l2p,tosca"], "l2p needs a VIT backbone"),
        (["--scenario", "imagenet-a"], "no data root was given"),
    ],
)
def test_bad_input_is_one_paragraph_exit_2_nothing_written(tmp_path, args, needle, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "out"
    result = invoke("run", "--out", str(out), "--scenario", "synthetic", "--no-progress", *args)
    assert result.exit_code == 2, result.output
    assert needle in result.stderr
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert not out.exists()


def test_corrupt_weights_file(tmp_path):
    bad = tmp_path / "w.pth"
    bad.write_text("not a checkpoint")
    result = invoke("run", "--out", str(tmp_path / "out"), "--weights", str(bad), *FAST)
    assert result.exit_code == 2
    assert str(bad) in result.stderr and "Traceback" not in result.output


def test_malformed_yaml_card(tmp_path, monkeypatch):
    from cl_bench.cards import catalogue

    (tmp_path / "broken.yaml").write_text("name: broken\ndefaults: {lr: [0.1\n")
    monkeypatch.setattr(catalogue, "METHODS_DIR", tmp_path)
    result = invoke("run", "--methods", "broken", "--out", str(tmp_path / "out"), *FAST[:3])
    assert result.exit_code == 2
    assert "broken.yaml is not valid YAML at line" in result.stderr


def test_list_commands():
    assert invoke("list", "methods").stdout.split()[::1].count("tosca") == 1
    scenarios = invoke("list", "scenarios").stdout
    assert all(s in scenarios for s in ("fmnist", "fmnist-full", "digits", "synthetic"))
    assert "efficientnet_lite0" in invoke("list", "backbones").stdout
    bad = invoke("list", "method")
    assert bad.exit_code == 2 and 'Did you mean "methods"?' in bad.stderr
