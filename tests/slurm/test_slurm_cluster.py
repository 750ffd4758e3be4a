"""`--launcher slurm` against a real one-node SLURM cluster (scripts/slurm-local.sh,
with slurmdbd accounting so job states are real), through the real CLI in its own
process: a grid equal to the local one, --no-wait and status, a requeued job that
resumes from its per-task checkpoint, time limits with and without --slurm-requeue,
a failing job, Ctrl-C while waiting. Skipped unless CL_BENCH_SLURM_TESTS=1."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.cli import invoke, status_of
from tests.helpers.probe import GRID, starts

pytestmark = pytest.mark.slurm

WAIT_S = 420
FP32 = ["--precision", "fp32"]


def wait_until(condition, what: str, limit_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.5)


def records(out: Path) -> dict[tuple[str, int], dict]:
    found = {}
    for path in sorted(out.glob("runs/*/*/*.json")):
        data = json.loads(path.read_text())
        found[(data["method"], data["seed"])] = data
    return found


def squeue_ids() -> list[str]:
    listed = subprocess.run(
        ["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True
    )
    return listed.stdout.split()


def sacct_states(job: str) -> list[str]:
    """Every state the job went through (-D: the requeued attempts too)."""
    listed = subprocess.run(
        ["sacct", "-n", "-X", "-D", "-P", "-o", "State", "-j", job],
        capture_output=True,
        text=True,
        check=True,
    )
    return [s.split()[0] for s in listed.stdout.split("\n") if s.strip()]


def holds(probe: Path) -> list[tuple[str, int]]:
    """(seed, pid) of every attempt that reached the probe's PROBE_HOLD_TASK."""
    log = Path(str(probe / "probe.log") + ".hold")
    if not log.exists():
        return []
    return [
        (seed, int(pid)) for seed, pid in (line.split() for line in log.read_text().splitlines())
    ]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def pending(job: str) -> bool:
    listed = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
    return "PENDING" in listed.stdout


def start_now(job: str) -> None:
    """A requeued job waits about two minutes (SLURM's BeginTime after a requeue) before
    it may start again; the tests let it start at once."""
    wait_until(lambda: pending(job), f"job {job} to be pending again")
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)


def job_of(said: str) -> str:
    """The job id cl-bench printed when it submitted (one run: a plain job; more: an
    array, whose tasks are `<job>_<index>`)."""
    found = re.search(r"runs? to slurm as job (\d+)", said)
    assert found, said
    return found.group(1)


def test_grid_on_slurm_equals_the_local_grid(slurm_cluster, tmp_path):
    args = [
        "--scenario",
        "synthetic",
        "--methods",
        "simplecil,tosca",
        "--set",
        "tosca.epochs=2",
        "--seeds",
        "1,2",
        "--no-progress",
        *FP32,
    ]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cl_bench",
            "run",
            "--out",
            str(tmp_path / "slurm"),
            *args,
            "--launcher",
            "slurm",
        ],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "submitted 4 runs to slurm" in done.stdout and done.stdout.rstrip().endswith("4 done")
    local = invoke("run", "--out", str(tmp_path / "local"), *args)
    assert local.exit_code == 0, local.output
    on_slurm, here = records(tmp_path / "slurm"), records(tmp_path / "local")
    assert sorted(on_slurm) == [("simplecil", 1), ("simplecil", 2), ("tosca", 1), ("tosca", 2)]
    for key, record in here.items():
        assert on_slurm[key]["acc_matrix"] == record["acc_matrix"], key
    assert sacct_states(job_of(done.stdout)) == ["COMPLETED"] * 4


def test_no_wait_then_status_pending_running_done(slurm_cluster, probe, start_grid, tmp_path):
    out = tmp_path / "out"
    grid = start_grid(
        out,
        "--seeds",
        "1,2",
        "--launcher",
        "slurm",
        "--no-wait",
        "--slurm-array-parallelism",
        "1",
        *FP32,
        log=tmp_path / "log",
        PROBE_HOLD="all",
    )
    assert grid.wait(WAIT_S) == 0, (tmp_path / "log").read_text()
    assert "not waiting: follow with `cl-bench status" in (tmp_path / "log").read_text()
    wait_until(
        lambda: status_of(out).splitlines()[-1] == "2 runs: 0 done, 1 running, 0 failed, 1 pending",
        "one run held by its job, the other pending behind it",
    )
    (probe / "go").touch()
    wait_until(
        lambda: status_of(out).splitlines()[-1] == "2 runs: 2 done, 0 running, 0 failed, 0 pending",
        "both runs done",
    )
    again = invoke("run", "--out", str(out), *GRID, "--seeds", "1,2", "--launcher", "slurm", *FP32)
    assert again.exit_code == 0, again.output
    assert again.stdout.count("finished") == 2 and again.stdout.rstrip().endswith("2 done")
    assert starts(probe) == {"1": 1, "2": 1}


def test_requeued_job_resumes_from_its_checkpoint(slurm_cluster, probe, start_grid, tmp_path):
    out = tmp_path / "out"
    grid = start_grid(
        out,
        "--seeds",
        "3",
        "--launcher",
        "slurm",
        "--slurm-requeue",
        *FP32,
        log=tmp_path / "log",
        PROBE_HOLD_TASK="2",
    )
    wait_until(lambda: len(holds(probe)) == 1, "the job to finish tasks 1-2 and hold")
    job = job_of((tmp_path / "log").read_text())
    subprocess.run(["scontrol", "requeue", job], check=True)
    wait_until(lambda: gone(holds(probe)[0][1]), "the first attempt to end")
    (probe / "go").touch()
    start_now(job)
    assert grid.wait(WAIT_S) == 0, (tmp_path / "log").read_text()
    record = records(out)[("probe", 3)]
    assert record["timing"]["resumed_from_task"] == 2
    assert starts(probe) == {"3": 2}
    assert "REQUEUED" in sacct_states(job) and sacct_states(job)[-1] == "COMPLETED"
    plain = invoke("run", "--out", str(tmp_path / "plain"), *GRID, "--seeds", "3", *FP32)
    assert plain.exit_code == 0, plain.output
    assert record["acc_matrix"] == records(tmp_path / "plain")[("probe", 3)]["acc_matrix"]


def tasks_of(job: str) -> dict[str, int]:
    """Seconds run so far by each unfinished task of a job (a plain job: itself; an
    array: `<job>_<i>`), picked from the whole queue by array job id (`squeue -j` once
    listed none of a job's tasks here while one of them was running)."""
    listed = subprocess.run(
        ["squeue", "-h", "-o", "%i %F %M"], capture_output=True, text=True, check=True
    )
    found = {}
    for task, array, used in (line.split() for line in listed.stdout.splitlines()):
        if array == job:
            days, _, clock = used.rpartition("-")  # [days-][hours:]minutes:seconds
            seconds = 0
            for part in clock.split(":"):
                seconds = seconds * 60 + int(part)
            found[task] = seconds + 86400 * int(days or 0)
    return found


def limit(job: str, minutes: int, start_now: bool = False) -> None:
    """Change the time limit of a job's unfinished tasks (root may, on any job; an
    array with a finished task refuses a job-wide update)."""
    extra = ["StartTime=now"] if start_now else []
    for task in tasks_of(job):
        subprocess.run(
            ["scontrol", "update", f"JobId={task}", f"TimeLimit={minutes}", *extra], check=True
        )


def end_soon(job: str) -> None:
    """Cut a running job's limit so that it ends 60-120 s from now, instead of waiting
    out its --slurm-time 5. That is more than the 75 s before its limit at which the job
    asked for submitit's USR2, so SLURM's periodic check (every 30 s) sends the signal
    before the limit kills the job. A flat one-minute limit raced: on a slow machine a
    job held past its first minute was past its new limit when it got it, and SLURM
    killed it at its next check, USR2 or not (its run then has no failure record)."""
    tasks = tasks_of(job)
    assert tasks, f"job {job} has no unfinished task"
    for task, seconds in tasks.items():
        subprocess.run(
            ["scontrol", "update", f"JobId={task}", f"TimeLimit={seconds // 60 + 2}"], check=True
        )


def job_logs(out: Path) -> str:
    """What submitit's jobs wrote to stderr, for a failed assertion to show."""
    return "\n".join(
        f"{p}:\n{p.read_text()[-3000:]}" for p in sorted(out.glob("runs/_submitit/*/*.err"))
    )


def test_time_limit_requeues_or_reports_timeout(slurm_cluster, probe, start_grid, tmp_path):
    """Two grids at once, each with one run held at its second task until its job's
    limit is cut to end a minute or two later: with --slurm-requeue the job is signalled
    before the limit, requeues itself, resumes from its checkpoint and finishes; without
    it, the run times out, status says so, the other run of its grid finishes, and the same
    command reruns only the one that timed out."""
    kept, lost = tmp_path / "kept", tmp_path / "lost"
    requeued = start_grid(
        kept,
        "--seeds",
        "4",
        "--launcher",
        "slurm",
        "--slurm-requeue",
        "--slurm-time",
        "5",
        *FP32,
        log=tmp_path / "kept.log",
        PROBE_HOLD_TASK="1@4",
    )
    timed = start_grid(
        lost,
        "--seeds",
        "5,6",
        "--launcher",
        "slurm",
        "--slurm-time",
        "5",
        *FP32,
        log=tmp_path / "lost.log",
        PROBE_HOLD_TASK="1@5",
    )
    wait_until(lambda: sorted(s for s, _ in holds(probe)) == ["4", "5"], "seeds 4 and 5 to hold")
    kept_job, lost_job = (job_of((tmp_path / f"{g}.log").read_text()) for g in ("kept", "lost"))
    end_soon(kept_job)
    end_soon(lost_job)
    wait_until(lambda: pending(kept_job), "seed 4's job to requeue itself")
    limit(kept_job, 5, start_now=True)
    assert timed.wait(WAIT_S) == 1, (tmp_path / "lost.log").read_text()
    (probe / "go").touch()
    assert requeued.wait(WAIT_S) == 0, (tmp_path / "kept.log").read_text()
    assert records(kept)[("probe", 4)]["timing"]["resumed_from_task"] == 1
    assert "REQUEUED" in sacct_states(kept_job)
    status = status_of(lost)
    assert "timed out: the SLURM job reached its --slurm-time" in status, status + job_logs(lost)
    assert status.splitlines()[-1] == "2 runs: 1 done, 0 running, 1 failed, 0 pending", status
    again = invoke(
        "run",
        "--out",
        str(lost),
        *GRID,
        "--seeds",
        "5,6",
        "--launcher",
        "slurm",
        "--slurm-time",
        "5",
        *FP32,
    )
    assert again.exit_code == 0, again.output
    assert starts(probe)["5"] == 2 and starts(probe)["6"] == 1


def test_failed_job_shows_its_error_and_the_others_finish(
    slurm_cluster, probe, tmp_path, monkeypatch
):
    out = tmp_path / "out"
    monkeypatch.setenv("PROBE_FAIL", "8")
    done = invoke("run", "--out", str(out), *GRID, "--seeds", "7,8", "--launcher", "slurm", *FP32)
    assert done.exit_code == 1, done.output
    status = status_of(out)
    assert "RuntimeError: probe failure for seed 8" in status
    assert status.splitlines()[-1] == "2 runs: 1 done, 0 running, 1 failed, 0 pending"


def test_ctrl_c_while_waiting_leaves_the_jobs_running(slurm_cluster, probe, start_grid, tmp_path):
    out = tmp_path / "out"
    grid = start_grid(
        out, "--seeds", "9", "--launcher", "slurm", *FP32, log=tmp_path / "log", PROBE_HOLD="all"
    )
    wait_until(lambda: starts(probe) == {"9": 1}, "the job to start")
    grid.send_signal(signal.SIGINT)
    grid.wait(60)
    said = (tmp_path / "log").read_text()
    assert "stopped waiting; the jobs keep running" in said
    job = job_of(said)
    assert job in squeue_ids()
    (probe / "go").touch()
    wait_until(lambda: job not in squeue_ids(), "the job to finish")
    again = invoke("run", "--out", str(out), *GRID, "--seeds", "9", "--launcher", "slurm", *FP32)
    assert again.exit_code == 0, again.output
    assert "skip synthetic/probe seed 9: finished" in again.stdout
    assert starts(probe) == {"9": 1}
