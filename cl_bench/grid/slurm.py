"""A grid's runs as one submitit job array on SLURM (``--launcher slurm``): submitted,
waited for, and what sbatch refuses said in one paragraph."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from pathlib import Path

from cl_bench.errors import UserError
from cl_bench.grid import options
from cl_bench.grid.options import DEFAULT_SLURM_TIME_MIN, LaunchOptions
from cl_bench.grid.worker import Job, Outcome, Requeued, work

Echo = Callable[[str], None]


def signal_delay_s(minutes: int) -> int:
    """How long before its time limit a job is told to requeue itself (submitit's
    USR2): submitit's 90 s, but at most a quarter of the limit. With 90 s, a job whose
    limit is under 90 s would be signalled as it starts and requeue itself forever."""
    return min(90, minutes * 60 // 4)


class SubmissionRefused(UserError):
    """sbatch did not accept the job array."""


def logs_of(out: Path) -> Path:
    """Where submitit keeps a grid's pickles, batch files and job logs."""
    return out / "runs" / "_submitit"


def submit(todo: list[Job], opts: LaunchOptions, out: Path, echo: Echo) -> tuple[list, str]:
    """One submitit job array, one job per run; returns the jobs and the cluster."""
    import submitit

    cluster = options.slurm_cluster()
    logs = logs_of(out)
    executor = submitit.AutoExecutor(folder=logs / "%j", cluster=cluster)
    minutes = opts.slurm_time or DEFAULT_SLURM_TIME_MIN
    executor.update_parameters(
        name="cl-bench",
        timeout_min=minutes,
        gpus_per_node=opts.slurm_gpus,
        slurm_gres=opts.slurm_gres,
        cpus_per_task=opts.slurm_cpus,
        slurm_partition=opts.slurm_partition,
        slurm_array_parallelism=opts.slurm_array_parallelism,
        slurm_signal_delay_s=signal_delay_s(minutes),
        slurm_additional_parameters={"requeue": True} if opts.slurm_requeue else {},
    )
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # submitit prints sbatch's stderr too
            submitted = executor.map_array(Requeued() if opts.slurm_requeue else work, todo)
    except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError) as e:
        said = " ".join(str(e).split())[:300]
        raise SubmissionRefused(
            f"--launcher slurm: sbatch did not accept the job array "
            f"({said}). Nothing was submitted or written; fix the cause, "
            "e.g. the partition or the limits asked for, and run the same "
            "command again."
        ) from None
    echo(
        f"submitted {len(todo)} runs to {cluster} as job {submitted[0].job_id.split('_')[0]}; "
        f"logs in {logs}"
    )
    if not opts.wait:
        echo(
            f"not waiting: follow with `cl-bench status --results {out}`; the same command "
            "prints the summary once they are done (finished runs are skipped)."
        )
    return submitted, cluster


def wait(
    submitted: list, todo: list[Job], poll_s: float, out: Path, echo: Echo
) -> Iterator[tuple[Job, Outcome | BaseException]]:
    """Yield each job as submitit sees it end. Ctrl-C stops the waiting, not the jobs."""
    import submitit

    by_id = {job.job_id: run for job, run in zip(submitted, todo, strict=True)}
    try:
        for job in submitit.helpers.as_completed(submitted, poll_frequency=poll_s):
            try:
                yield by_id[job.job_id], job.result()
            except Exception as e:  # the run failed or the job died; the folder says which
                yield by_id[job.job_id], e
    except KeyboardInterrupt:
        echo(
            f"stopped waiting; the jobs keep running: follow with `cl-bench status --results "
            f"{out}`, re-run the command to collect them."
        )
        raise
