"""No traceback at the edges: something else where a run's files go, names too long
for the filesystem, and `cl-bench account`'s arguments. Each is one paragraph, exit 2,
before anything is written (or, for account, the stream the arguments ask for)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cl_bench.errors import UserError
from cl_bench.scenarios.order import split_in_tasks, task_split
from cl_bench.store import results
from cl_bench.store.filelock import open_lock_file
from tests.helpers.cli import invoke, refused

RUN = [
    "--methods",
    "simplecil",
    "--backbone",
    "efficientnet_lite0",
    "--image-size",
    "32",
    "--precision",
    "fp32",
    "--no-progress",
]
LONG = "a" * 300
TOO_LONG = 'the name "aaaaaaaaaaaaaaaaaaaaaaaa..." is 300 bytes long'


def planned(out: Path, scenario: str = "synthetic") -> Path:
    """The result path of SimpleCIL seed 1993 in ``out``, from a dry run (writes nothing)."""
    dry = invoke("run", "--out", str(out), "--scenario", scenario, *RUN, "--dry-run")
    return Path(re.search(r"pending +simplecil seed 1993 +(\S+)", dry.stdout).group(1))


def tree(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*"))


@pytest.mark.parametrize(
    ("suffix", "role"),
    [
        (".lock", "lock file"),
        (".ckpt", "checkpoint"),
        (".failed", "failure record"),
        ("", "result"),
    ],
)
def test_a_folder_named_like_a_run_file_is_refused_before_anything_is_written(
    tmp_path, suffix, role
):
    out = tmp_path / "out"
    result = planned(out)
    taken = result.with_name(result.name + suffix)
    taken.mkdir(parents=True)
    before = tree(out)
    refused(
        invoke("run", "--out", str(out), "--scenario", "synthetic", *RUN),
        f"{taken} is a folder, but it is where cl-bench keeps the {role} of the run "
        f"{result.name}. Remove or rename it",
    )
    assert tree(out) == before  # no grid file, lock or failure record


def test_a_fifo_as_lock_file_and_a_file_as_results_folder(tmp_path):
    out = tmp_path / "out"
    result = planned(out)
    result.parent.mkdir(parents=True)
    os.mkfifo(result.with_name(result.name + ".lock"))
    refused(
        invoke("run", "--out", str(out), "--scenario", "synthetic", *RUN),
        f"{result}.lock is not a regular file",
    )
    result.with_name(result.name + ".lock").unlink()
    result.parent.rmdir()
    result.parent.write_text("")
    refused(
        invoke("run", "--out", str(out), "--scenario", "synthetic", *RUN),
        f"{result.parent} is a file, but cl-bench keeps results in a folder of that name",
    )
    assert tree(out) == [out / "runs", out / "runs" / "synthetic", result.parent]


def test_status_does_not_hang_on_a_fifo_as_lock_file(tmp_path):
    """Opening a FIFO for reading waits for a writer: `status` would hang forever."""
    run = tmp_path / "out" / "runs" / "synthetic" / "simplecil" / "1993-0123456789.json"
    run.parent.mkdir(parents=True)
    os.mkfifo(results.lock_path(run))
    repo = str(Path(__file__).resolve().parents[2])  # this checkout's cl_bench
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p),
    }
    status = subprocess.run(
        [sys.executable, "-m", "cl_bench", "status", "--results", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[-1] == "1 runs: 0 done, 0 running, 0 failed, 1 pending"


def test_refused_with_a_launcher_and_for_a_later_scenario(tmp_path):
    """A worker pool plans first too; with several scenarios, the last one's paths are
    checked before the first one's runs write anything."""
    out = tmp_path / "out"
    lock = planned(out, "digits")
    lock = lock.with_name(lock.name + ".lock")
    lock.mkdir(parents=True)
    before = tree(out)
    for extra in (
        ["--scenarios", "synthetic,digits"],
        ["--scenario", "digits", "--launcher", "local", "--jobs", "1"],
    ):
        refused(invoke("run", "--out", str(out), *RUN, *extra), f"{lock} is a folder")
        assert tree(out) == before


def test_a_lock_file_that_cannot_be_opened_is_a_user_error(tmp_path):
    with pytest.raises(
        UserError,
        match=f"Cannot open the lock file {tmp_path} "
        r"\(Is a directory\): cl-bench keeps a lock there",
    ):
        open_lock_file(tmp_path)


@pytest.mark.parametrize("out", [LONG, f"x/{LONG}/y"])
def test_an_out_name_too_long_is_refused_and_nothing_created(tmp_path, monkeypatch, out):
    monkeypatch.chdir(tmp_path)
    refused(invoke("run", "--out", out, "--scenario", "synthetic", *RUN), f"--out: {TOO_LONG}")
    assert tree(tmp_path) == []


def test_an_out_path_too_long_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    deep = "/".join(["abcdefghi"] * 400)
    result = invoke("run", "--out", deep, "--scenario", "synthetic", *RUN)
    refused(result, "--out: the path is ")
    assert "bytes long, but cl-bench writes files below it" in result.stderr
    assert tree(tmp_path) == []


def test_a_feature_cache_name_too_long_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path / LONG))
    out = tmp_path / "out"
    refused(
        invoke("run", "--out", str(out), "--scenario", "synthetic", *RUN),
        f"The feature cache ($CL_BENCH_CACHE): {TOO_LONG}",
        out,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["status", "--results", LONG],
        ["report", "--results", LONG, "--out", "report"],
        ["run", "--scenario", "fmnist-full", "--data-root", LONG, *RUN],
        ["data", "check", "--scenario", "fmnist-full", "--data-root", LONG],
        ["run", "--scenario", "synthetic", "--weights", f"{LONG}.pth", *RUN],
        [
            "account",
            "--methods",
            "simplecil",
            "--backbone",
            "efficientnet_lite0",
            "--weights",
            f"{LONG}.pth",
        ],
        ["list", "methods", "--cards", LONG],
    ],
)
def test_any_path_too_long_is_one_paragraph(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    result = invoke(*args)
    refused(result, f"The path {'a' * 40}...")
    assert "is too long for the filesystem" in result.stderr
    assert tree(tmp_path) == []


@pytest.mark.parametrize(
    ("classes", "tasks", "sizes"),
    [
        (10, 3, [4, 3, 3]),
        (200, 10, [20] * 10),
        (3, 2, [2, 1]),
        (7, 1, [7]),
        (5, 5, [1] * 5),
        (11, 5, [3, 2, 2, 2, 2]),
    ],
)
def test_split_in_tasks_is_a_scenarios_split_with_the_tasks_asked_for(classes, tasks, sizes):
    assert split_in_tasks(classes, tasks) == sizes
    assert task_split(classes, sizes[0], classes // tasks) == sizes  # init_cls, increment


def test_account_uneven_classes_gives_the_tasks_asked_for():
    result = invoke(
        "account",
        "--tasks",
        "3",
        "--classes",
        "10",
        "--methods",
        "simplecil",
        "--backbone",
        "efficientnet_lite0",
        "--json",
    )
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert (row["tasks"], row["classes"]) == (3, 10)
    # one 1280-d prototype per class; the cosine scale sigma comes with the first task
    assert row["added_per_task"] == [4 * 1280 + 1, 3 * 1280, 3 * 1280]
    assert row["stored_at_end"] == 10 * 1280 + 1


def test_account_shows_progress_per_task_on_stderr_only():
    result = invoke(
        "account",
        "--tasks",
        "2",
        "--classes",
        "4",
        "--methods",
        "finetune",
        "--backbone",
        "efficientnet_lite0",
        "--image-size",
        "64",  # the progress lines do not depend on it; 224 px costs more
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert [row["method"] for row in json.loads(result.stdout)] == ["finetune"]
    tasks = [line.split(":")[0] for line in result.stderr.splitlines()]
    assert tasks == ["counting finetune task 1/2", "counting finetune task 2/2"]
    quiet = invoke(
        "account",
        "--tasks",
        "2",
        "--classes",
        "4",
        "--methods",
        "finetune",
        "--backbone",
        "efficientnet_lite0",
        "--image-size",
        "64",  # the progress lines do not depend on it; 224 px costs more
        "--json",
        "--no-progress",
    )
    assert quiet.stderr == "" and json.loads(quiet.stdout) == json.loads(result.stdout)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--methods", ""], '--methods "" names no method; give at least one'),
        (["--methods", " , "], '--methods " , " names no method'),
        (["--methods", "simplecil,tosac"], 'Unknown method "tosac". Did you mean "tosca"?'),
        (["--image-size", "0"], "--image-size 0: the input resolution must be a positive"),
        (["--backbone", "vit_tiny_patch16_224", "--image-size", "7"], "must be a multiple of 16"),
    ],
)
def test_account_bad_arguments_are_refused_before_counting(args, needle):
    refused(
        invoke("account", "--backbone", "efficientnet_lite0", "--methods", "simplecil", *args),
        needle,
    )
