"""`--launcher slurm` where sbatch is on PATH but no controller answers: refused before
anything loads or is written (squeue asked first, with a time limit); a submission
that sbatch itself refuses is one paragraph too. Fake SLURM tools on PATH log their
calls and fail as they do against an unreachable controller."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cl_bench.grid import options
from tests.helpers.cli import invoke, refused

RUN = [
    "--scenario",
    "synthetic",
    "--methods",
    "simplecil",
    "--backbone",
    "efficientnet_lite0",
    "--image-size",
    "32",
    "--precision",
    "fp32",
    "--no-progress",
    "--launcher",
    "slurm",
]
UNREACHABLE = "Unable to contact slurm controller (connect failure)"


def fake_slurm(tmp_path: Path, monkeypatch, squeue: str, sbatch: str) -> Path:
    """sbatch, srun and squeue running the given shell lines; returns the call log."""
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in {"sbatch": sbatch, "srun": "exit 1", "squeue": squeue}.items():
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n{body}\n')
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def test_no_controller_answering_squeue_is_refused_before_anything(tmp_path, monkeypatch):
    calls = fake_slurm(
        tmp_path,
        monkeypatch,
        squeue=f'echo "slurm_load_jobs error: {UNREACHABLE}" >&2; exit 1',
        sbatch="exit 1",
    )
    out = tmp_path / "out"
    result = invoke("run", "--out", str(out), *RUN)
    refused(
        result,
        "--launcher slurm: the SLURM controller does not answer here (`squeue` "
        f"failed: slurm_load_jobs error: {UNREACHABLE}).",
        out,
    )
    assert "Nothing was written" in result.stderr and result.stdout == ""  # nothing loaded
    assert calls.read_text() == f"squeue --noheader --format=%i --user={os.getuid()}\n"


def test_a_silent_controller_is_refused_after_the_time_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(options, "PROBE_TIMEOUT_S", 0.3)
    fake_slurm(tmp_path, monkeypatch, squeue="exec sleep 20", sbatch="exit 1")
    out = tmp_path / "out"
    refused(
        invoke("run", "--out", str(out), *RUN),
        "the SLURM controller did not answer `squeue` within 0.3 s",
        out,
    )


@pytest.mark.parametrize("wait", [[], ["--no-wait"]])
def test_a_submission_sbatch_refuses_is_one_paragraph_and_leaves_nothing(
    tmp_path, monkeypatch, wait
):
    """The controller answered squeue, then refused the array: no traceback, and what the
    submission wrote before sbatch answered (the grid's record, submitit's pickles and
    batch file) is gone with the folders it made. Before, `--out` kept a grid of pending
    runs and the files in `_submitit/`."""
    calls = fake_slurm(
        tmp_path,
        monkeypatch,
        squeue="exit 0",
        sbatch=f'echo "sbatch: error: Batch job submission failed: {UNREACHABLE}" >&2; exit 1',
    )
    out = tmp_path / "out"
    result = invoke("run", "--out", str(out), *RUN, *wait)
    refused(
        result,
        "--launcher slurm: sbatch did not accept the job array (sbatch: error: "
        f"Batch job submission failed: {UNREACHABLE}). Nothing was submitted or "
        "written; fix the cause",
        out,
    )
    assert [line.split()[0] for line in calls.read_text().splitlines()] == ["squeue", "sbatch"]
    assert not out.exists()


def test_a_refused_submission_keeps_what_was_there(tmp_path, monkeypatch):
    """Earlier grids and job folders in `--out` stay as they were."""
    fake_slurm(tmp_path, monkeypatch, squeue="exit 0", sbatch="echo refused >&2; exit 1")
    out = tmp_path / "out"
    earlier = [
        out / "runs" / "_grids" / "0123456789ab.json",
        out / "runs" / "_submitit" / "4242" / "4242_0_log.out",
        out / "runs" / "_submitit" / "4242_submitted.pkl",
    ]
    for path in earlier:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("earlier")
    before = sorted(out.rglob("*"))
    refused(invoke("run", "--out", str(out), *RUN), "Nothing was submitted or written")
    assert sorted(out.rglob("*")) == before
