"""Grids in worker processes: submitit (its LocalExecutor standing in for SLURM, and a
fake sbatch for the submission itself), the local process pool, a grid SIGKILLed
half-way and resumed, two invocations of one grid at once, failures in `status`.

Runs use `probe`, a test-only method: SimpleCIL (features only, fast) that logs every
start and, on request through the environment, holds until a file appears or fails.
Holding makes the kill and the overlap deterministic instead of timing races. Its
card lives in a temporary methods folder; workers get resolved cards in their jobs
and import the strategy through PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cl_bench.engine import features
from cl_bench.engine.environment import resolve_precision
from cl_bench.engine.runner import SharedFeatureStore
from cl_bench.grid import options
from cl_bench.store import results
from tests.helpers.cli import invoke, status_of
from tests.helpers.probe import GRID, starts

WAIT_S = 150
# what `--precision auto` gives local workers; SLURM jobs decide without looking at this CPU
PRECISION = resolve_precision("auto", torch.device("cpu"))


@pytest.fixture(scope="module", autouse=True)
def warm_feature_cache(tmp_path_factory):
    """A feature cache of this module's own, warmed in this process: workers read the
    synthetic features from disk, as on a warm cache, so each test's time is its
    processes; other modules' tests keep their cold cache whatever the order."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CL_BENCH_CACHE", str(tmp_path_factory.mktemp("launch_cache")))
        result = invoke(
            "run",
            "--out",
            str(tmp_path_factory.mktemp("warm")),
            "--scenario",
            "synthetic",
            "--methods",
            "simplecil",
            "--no-progress",
        )
        assert result.exit_code == 0, result.output
        yield


def result_files(out: Path) -> list[Path]:
    return sorted(out.glob("runs/*/*/*.json"))


def seeds_of(out: Path) -> list[int]:
    return sorted(json.loads(p.read_text())["seed"] for p in result_files(out))


def leftovers(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if p.name.endswith((".tmp", ".failed")))


def wait_for(condition, what: str, procs: list[subprocess.Popen]) -> None:
    """Poll ``condition``; fail when it takes too long or a grid ends before it holds."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--jobs", "2"], "only apply with --launcher local (--jobs)"),
        (["--launcher", "local", "--slurm-gpus", "1"], "only apply with --launcher slurm"),
        (["--launcher", "local", "--no-wait"], "only apply with --launcher slurm"),
        (["--launcher", "slurm", "--jobs", "2"], "--jobs is for --launcher local"),
        (["--launcher", "kubernetes"], 'Unknown launcher "kubernetes"'),
        (["--launcher", "local", "--jobs", "0"], "--jobs must be at least 1"),
        (["--launcher", "slurm", "--slurm-time", "1"], "--slurm-time must be at least 3 (minutes)"),
        (["--launcher", "slurm"], "sbatch and srun are not on PATH"),
        (["--launcher", "local", "--methods", "tosac"], 'Did you mean "tosca"?'),
        (["--launcher", "local", "--scenario", "synthetic,fminst"], 'Did you mean "fmnist"?'),
        # the second scenario's data is checked before the first scenario's runs start
        (
            ["--scenarios", "synthetic,fmnist-full", "--data-root", "/nonexistent"],
            "apt-get install",
        ),
        (
            [
                "--scenarios",
                "synthetic,fmnist-full",
                "--data-root",
                "/nonexistent",
                "--launcher",
                "local",
            ],
            "apt-get install",
        ),
    ],
)
def test_bad_launch_is_one_paragraph_exit_2_nothing_written(tmp_path, args, needle, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    out = tmp_path / "out"
    result = invoke("run", "--out", str(out), "--scenario", "synthetic", "--no-progress", *args)
    assert result.exit_code == 2, result.output
    assert needle in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert not out.exists()


def test_submitit_grid_reports_failure_and_reruns_it(probe, tmp_path, monkeypatch):
    """--launcher slurm through submitit with its LocalExecutor: real job subprocesses."""
    monkeypatch.setattr(options, "slurm_cluster", lambda: "local")
    monkeypatch.setenv("PROBE_FAIL", "2")
    out = tmp_path / "out"
    args = [
        "run",
        "--out",
        str(out),
        *GRID,
        "--seeds",
        "1,2",
        "--precision",
        PRECISION,
        "--launcher",
        "slurm",
        "--slurm-time",
        "10",
        "--slurm-array-parallelism",
        "2",
    ]
    first = invoke(*args)
    assert first.exit_code == 1, first.output
    assert "submitted 2 runs to local" in first.stdout
    assert "FAILED synthetic/probe seed 2: RuntimeError: probe failure for seed 2" in first.stdout
    assert "1 done, 1 failed" in first.stdout and "the same command runs them again" in (
        first.stderr
    )
    assert seeds_of(out) == [1]
    assert list(out.glob("runs/_submitit/*/*_log.out")), "submitit wrote no job logs"
    report = status_of(out)
    assert re.search(r" 2 +\w+ +failed +RuntimeError: probe failure for seed 2\n", report)
    assert report.splitlines()[-1] == "2 runs: 1 done, 0 running, 1 failed, 0 pending"
    failure = results.read_failure(
        out
        / "runs"
        / "synthetic"
        / "probe"
        / next(p.name.removesuffix(".failed") for p in out.glob("runs/*/*/*.failed"))
    )
    assert failure["error"]["type"] == "RuntimeError"
    assert any("raise RuntimeError" in line for line in failure["error"]["traceback_tail"])

    monkeypatch.delenv("PROBE_FAIL")
    second = invoke(*args)
    assert second.exit_code == 0, second.output
    assert "skip synthetic/probe seed 1: finished" in second.stdout
    assert seeds_of(out) == [1, 2] and leftovers(out) == []
    assert starts(probe) == {"1": 1, "2": 2}
    assert status_of(out).splitlines()[-1] == "2 runs: 2 done, 0 running, 0 failed, 0 pending"


def test_slurm_submission_no_wait(probe, tmp_path, monkeypatch):
    """What goes to sbatch: one array, the SLURM settings (the gres as given), a CUDA
    job per run, bf16 since an A100 has bf16 units; status then shows the planned runs
    as pending. (A fake sbatch records the file.)"""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(
        f'#!/bin/sh\ncp "$1" {tmp_path}/submitted.sh\necho "Submitted batch job 4242"\n'
    )
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit looks for it; never run
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")  # a controller that answers
    for tool in ("sbatch", "srun", "squeue"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "out"
    result = invoke(
        "run",
        "--out",
        str(out),
        *GRID,
        "--scenarios",
        "synthetic,digits",
        "--seeds",
        "1,2",
        "--launcher",
        "slurm",
        "--slurm-partition",
        "gpu",
        "--slurm-gres",
        "gpu:a100:1",
        "--slurm-cpus",
        "8",
        "--slurm-time",
        "90",
        "--slurm-array-parallelism",
        "2",
        "--no-wait",
    )
    assert result.exit_code == 0, result.output
    assert "submitted 4 runs to slurm as job 4242" in result.stdout
    assert result.stdout.count("cuda/bf16") == 2 and "4 queued" in result.stdout
    sbatch = (tmp_path / "submitted.sh").read_text()
    for flag in (
        "--array=0-3%2",
        "--partition=gpu",
        "--gres=gpu:a100:1",
        "--cpus-per-task=8",
        "--time=90",
        "--job-name=cl-bench",
    ):
        assert f"#SBATCH {flag}" in sbatch, sbatch
    assert result_files(out) == [] and starts(probe) == {}
    report = status_of(out)
    rows = report.splitlines()[1:-1]
    assert Counter(row.split()[0] for row in rows) == {"synthetic": 2, "digits": 2}, report
    assert report.splitlines()[-1] == "4 runs: 0 done, 0 running, 0 failed, 4 pending"


def test_sigkilled_grid_resumes_each_run_once(probe, start_grid, tmp_path):
    """Kill the whole grid (parent and workers) with SIGKILL once seed 1 is written
    and seeds 2 and 3 are in flight; the same command finishes it."""
    out = tmp_path / "out"
    grid = start_grid(
        out,
        "--seeds",
        "1,2,3",
        "--launcher",
        "local",
        "--jobs",
        "2",
        log=tmp_path / "grid.log",
        PROBE_HOLD="2,3",
    )
    wait_for(
        lambda: seeds_of(out) == [1] and starts(probe) == {"1": 1, "2": 1, "3": 1},
        "seed 1 finished and seeds 2, 3 running",
        [grid],
    )
    os.killpg(grid.pid, signal.SIGKILL)
    grid.wait()
    wait_for(
        lambda: subprocess.run(["pgrep", "-g", str(grid.pid)], capture_output=True).returncode == 1,
        "the killed grid's processes to go",
        [],
    )
    report = status_of(out)
    assert report.count("interrupted: started") == 2, report
    assert report.splitlines()[-1] == "3 runs: 1 done, 0 running, 0 failed, 2 pending"

    again = invoke(
        "run", "--out", str(out), *GRID, "--seeds", "1,2,3", "--launcher", "local", "--jobs", "2"
    )
    assert again.exit_code == 0, again.output
    assert "skip synthetic/probe seed 1: finished" in again.stdout
    assert seeds_of(out) == [1, 2, 3] and len(result_files(out)) == 3
    assert leftovers(out) == []
    assert starts(probe) == {"1": 1, "2": 2, "3": 2}
    assert not any(results.probe_lock(p).held for p in result_files(out))
    clean = tmp_path / "clean"
    sequential = invoke("run", "--out", str(clean), *GRID, "--seeds", "1,2,3")
    assert sequential.exit_code == 0, sequential.output
    for grid_file, clean_file in zip(result_files(out), result_files(clean), strict=True):
        assert grid_file.name == clean_file.name
        a, b = json.loads(grid_file.read_text()), json.loads(clean_file.read_text())
        assert (a["acc_matrix"], a["acc_seen"]) == (b["acc_matrix"], b["acc_seen"])


def test_two_invocations_of_one_grid_run_each_run_once(probe, start_grid, tmp_path):
    """Both invocations start together; every run is held until both have tried every
    run, so each run is claimed once and skipped once as running elsewhere."""
    out = tmp_path / "out"
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    grids = [
        start_grid(
            out, "--seeds", "1,2", "--launcher", "local", "--jobs", "2", log=log, PROBE_HOLD="all"
        )
        for log in logs
    ]

    def skipped() -> int:
        return sum(log.read_text().count(": running in ") for log in logs)

    wait_for(
        lambda: sum(starts(probe).values()) == 2 and skipped() == 2,
        "both runs claimed and skipped once each",
        grids,
    )
    (probe / "go").touch()
    for g, log in zip(grids, logs, strict=True):
        assert g.wait(WAIT_S) == 0, log.read_text()
    assert starts(probe) == {"1": 1, "2": 1}
    assert seeds_of(out) == [1, 2] and leftovers(out) == []
    assert status_of(out).splitlines()[-1] == "2 runs: 2 done, 0 running, 0 failed, 0 pending"


def test_an_out_of_memory_run_of_a_local_grid_fails_alone(probe, tmp_path, monkeypatch):
    """Seed 2 runs out of memory in its worker: its .failed record names the settings to
    lower, the worker goes on with the next run, and every other run finishes."""
    monkeypatch.setenv("PROBE_OOM", "2")
    out = tmp_path / "out"
    grid = invoke(
        "run", "--out", str(out), *GRID, "--seeds", "1,2,3", "--launcher", "local", "--jobs", "2"
    )
    assert grid.exit_code == 1, grid.output
    assert "FAILED synthetic/probe seed 2: OutOfMemory: probe ran out of memory" in grid.stdout
    assert "2 done, 1 failed" in grid.stdout and seeds_of(out) == [1, 3]
    failure = results.read_failure(next(out.glob("runs/*/*/2-*.failed")).with_suffix(""))
    assert failure["error"]["type"] == "OutOfMemory"
    assert "--precision bf16" in failure["error"]["message"]
    assert status_of(out).splitlines()[-1] == "3 runs: 2 done, 0 running, 1 failed, 0 pending"


def test_concurrent_workers_extract_features_once(tmp_path, monkeypatch):
    """Two stores (as in two workers) miss the same cache key at once: one extracts,
    the other waits for its lock and reads the file."""
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path / "cache"))
    calls = []

    def slow_extract(backbone, images, device, **kwargs):
        calls.append(len(images))
        time.sleep(0.5)
        return torch.arange(len(images) * 4, dtype=torch.float32).reshape(-1, 4)

    monkeypatch.setattr(features, "extract", slow_extract)
    backbone = SimpleNamespace(
        name="fake", weights_digest="0", normalization=None, input_size=8, dim=4, runtime="torch"
    )
    data = SimpleNamespace(
        name="fake",
        fingerprint="f",
        on_disk=False,
        train_x=torch.zeros(3, 1, 8, 8),
        test_x=torch.zeros(2, 1, 8, 8),
    )
    stores = [SharedFeatureStore(torch.device("cpu"), progress=False) for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda store: store.get(backbone, data, "train"), stores))
    assert calls == [3]
    assert torch.equal(got[0], got[1]) and sorted(s.hits for s in stores) == [0, 1]


def test_dry_run_for_slurm_needs_no_sbatch(tmp_path, monkeypatch):
    """The plan of a cluster grid can be printed on a laptop: no sbatch, no controller."""
    monkeypatch.setenv("PATH", str(tmp_path))
    out = tmp_path / "out"
    result = invoke(
        "run",
        "--out",
        str(out),
        "--scenario",
        "synthetic",
        "--methods",
        "simplecil,tosca",
        "--seeds",
        "1,2",
        "--launcher",
        "slurm",
        "--dry-run",
        "--no-progress",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.count("synthetic/simplecil") == 2 and "tosca" in result.stdout
    assert not out.exists()


@pytest.mark.parametrize(("raw", "want"), [("", 15.0), ("1", 1.0), ("0", 0.2)])
def test_slurm_poll_interval(raw, want, monkeypatch):
    monkeypatch.setenv("CL_BENCH_SLURM_POLL_S", raw)
    assert options.poll_s("slurm") == want and options.poll_s("local") == 0.5


def test_bad_slurm_poll_interval_is_refused(monkeypatch):
    from cl_bench.errors import UserError

    monkeypatch.setenv("CL_BENCH_SLURM_POLL_S", "often")
    with pytest.raises(UserError, match="CL_BENCH_SLURM_POLL_S='often' is not a number"):
        options.poll_s("slurm")
