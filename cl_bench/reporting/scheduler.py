"""What SLURM says about a job that ended without a result: asked only when the run's
lock names a SLURM job and ``sacct`` is on PATH, so ``cl-bench status`` still needs no
scheduler (elsewhere the answer is the folder's alone)."""

from __future__ import annotations

import shutil
import subprocess

SACCT_TIMEOUT_S = 10.0
WHY = {
    "TIMEOUT": "reached its --slurm-time; run the same command again with a larger "
    "--slurm-time, or with --slurm-requeue to resume it from its checkpoint",
    "PREEMPTED": "was preempted; run the same command again (add --slurm-requeue to "
    "resume preempted jobs without a new command)",
    "OUT_OF_MEMORY": "ran out of memory; give it more (sbatch --mem through the partition) "
    "and run the same command again",
    "NODE_FAIL": "lost its node; run the same command again",
    "CANCELLED": "was cancelled; run the same command again",
}


def job_state(job: str) -> str | None:
    """The job's final state by sacct (``TIMEOUT``, ``CANCELLED``...), or None when
    sacct is absent, silent or does not know the job."""
    if shutil.which("sacct") is None:
        return None
    try:
        done = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-o", "State", "-j", str(job)],
            capture_output=True,
            text=True,
            timeout=SACCT_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    states = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    return states[-1] if done.returncode == 0 and states else None


def ended(job: str) -> str | None:
    """``SLURM job 12: TIMEOUT, reached its --slurm-time; ...`` for a job that ended
    without finishing its run, or None when SLURM cannot say."""
    state = job_state(job)
    if state is None or state in ("RUNNING", "PENDING", "REQUEUED", "COMPLETED"):
        return None
    return f"SLURM job {job}: {state}" + (f", {WHY[state]}" if state in WHY else "")
