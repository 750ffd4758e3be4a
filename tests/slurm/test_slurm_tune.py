"""`cl-bench tune --launcher slurm` against the one-node SLURM cluster: the trials of a
search run as one job array, each scored on the validation split, and the study's
record names them. Skipped unless CL_BENCH_SLURM_TESTS=1 (tests/slurm/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cl_bench.store.records import Result
from tests.slurm.test_slurm_cluster import WAIT_S, job_of, sacct_states, wait_until

pytestmark = pytest.mark.slurm


def test_trials_run_as_a_slurm_array(slurm_cluster, tmp_path):
    done = subprocess.run(
        [
            sys.executable, "-m", "cl_bench", "tune", "--method", "tosca",
            "--scenario", "synthetic", "--trials", "2", "--space", "tosca.lr=1e-3..1e-1:log",
            "--set", "tosca.epochs=1", "--precision", "fp32", "--no-progress",
            "--results", str(tmp_path), "--launcher", "slurm",
        ],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = tmp_path.glob("synthetic/tosca/*/tune.json")
    record = json.loads(path.read_text())
    trials = record["trials"]
    assert [t["state"] for t in trials] == ["complete"] * 2
    assert record["test_split_read"] is False and record["cost"]["runs"] == 2
    for trial in trials:
        (run,) = trial["runs"]
        result = Result.from_file(run)
        assert result.config["method"]["lr"] == trial["params"]["lr"]
        assert result.config["validation"] == {"fraction": 0.1, "seed": 0}
        assert trial["value"] == result.avg_acc
    job = job_of(done.stdout)  # slurmdbd records an array task's end a moment after it
    wait_until(lambda: sacct_states(job) == ["COMPLETED"] * 2, f"job {job} in sacct", 60)
