"""A grid's launcher options (``--launcher``, ``--jobs``, ``--slurm-*``), checked before
anything loads or runs, and the SLURM cluster behind ``--launcher slurm``: its tools on
PATH and its controller answering."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from cl_bench.errors import UserError, unknown
from cl_bench.grid.gpu_targets import check_gpu_arch
from cl_bench.grid.gres import parse_gres

LAUNCHERS = ("local", "slurm")
PROBE_TIMEOUT_S = 30.0  # a controller silent this long is as good as none for a submission
DEFAULT_SLURM_TIME_MIN = 240
# SLURM may send a job's warning signal (submitit's USR2, asked for a quarter of the
# limit before it, at most 90 s) up to 60 s early; a job signalled while Python and
# PyTorch are still starting dies without a word. From 3 minutes on it starts first.
MIN_SLURM_TIME_MIN = 3
POLL_S = {"slurm": 15.0, "local": 0.5}  # submitit clusters: SLURM, or its local stand-in


def poll_s(cluster: str) -> float:
    """Seconds between two looks at the jobs; ``CL_BENCH_SLURM_POLL_S`` overrides it
    for SLURM (a small cluster of one's own answers squeue/sacct at once)."""
    raw = os.environ.get("CL_BENCH_SLURM_POLL_S", "") if cluster == "slurm" else ""
    try:
        return max(float(raw), 0.2) if raw else POLL_S[cluster]
    except ValueError:
        raise UserError(
            f"CL_BENCH_SLURM_POLL_S={raw!r} is not a number of seconds; unset it "
            f"or give e.g. 5 (default {POLL_S['slurm']:g})."
        ) from None


@dataclass(frozen=True)
class LaunchOptions:
    """``--launcher`` and its settings; ``launcher=None`` runs in-process as before."""

    launcher: str | None = None
    jobs: int | None = None
    slurm_partition: str | None = None
    slurm_gpus: int | None = None
    slurm_cpus: int | None = None
    slurm_time: int | None = None
    slurm_array_parallelism: int | None = None
    wait: bool = True
    slurm_requeue: bool = False
    slurm_gres: str | None = None
    slurm_gpu_arch: str | None = None

    def slurm_given(self) -> list[str]:
        names = {
            "--slurm-partition": self.slurm_partition,
            "--slurm-gpus": self.slurm_gpus,
            "--slurm-gres": self.slurm_gres,
            "--slurm-gpu-arch": self.slurm_gpu_arch,
            "--slurm-cpus": self.slurm_cpus,
            "--slurm-time": self.slurm_time,
            "--slurm-array-parallelism": self.slurm_array_parallelism,
            "--slurm-requeue": self.slurm_requeue or None,
        }
        return [name for name, value in names.items() if value is not None]


def check_options(opts: LaunchOptions, submitting: bool = True) -> None:
    """Every launcher mistake is a one-paragraph error before anything loads or runs.
    ``submitting=False`` (a dry run): the plan is printed without a cluster, so sbatch
    and the controller are not needed."""
    if opts.launcher is None:
        given = (
            opts.slurm_given()
            + (["--jobs"] if opts.jobs is not None else [])
            + ([] if opts.wait else ["--no-wait"])
        )
        if given:
            raise UserError(
                f"{', '.join(given)} only apply with --launcher local (--jobs) or "
                "--launcher slurm (--slurm-*, --no-wait); add the launcher, e.g. "
                "--launcher local --jobs 4."
            )
        return
    if opts.launcher not in LAUNCHERS:
        raise unknown("launcher", opts.launcher, LAUNCHERS)
    if opts.launcher == "local" and (opts.slurm_given() or not opts.wait):
        extra = opts.slurm_given() + ([] if opts.wait else ["--no-wait"])
        raise UserError(
            f"{', '.join(extra)} only apply with --launcher slurm; --launcher local "
            "takes --jobs N (parallel worker processes on this machine)."
        )
    if opts.launcher == "slurm" and opts.jobs is not None:
        raise UserError(
            "--jobs is for --launcher local; on SLURM every run is one job of an "
            "array and --slurm-array-parallelism caps how many run at once."
        )
    for name, value, low in (
        ("--jobs", opts.jobs, 1),
        ("--slurm-gpus", opts.slurm_gpus, 0),
        ("--slurm-cpus", opts.slurm_cpus, 1),
        ("--slurm-time", opts.slurm_time, MIN_SLURM_TIME_MIN),
        ("--slurm-array-parallelism", opts.slurm_array_parallelism, 1),
    ):
        if value is not None and value < low:
            why = (
                " (minutes): SLURM may send the job's warning signal up to 60 s early, "
                "and a job signalled while it is still starting dies without a result"
                if name == "--slurm-time"
                else ""
            )
            raise UserError(f"{name} must be at least {low}{why}, not {value}.")
    check_one_gpu_per_job(opts)
    if submitting and opts.launcher == "slurm" and slurm_cluster() == "slurm":
        probe_controller()


def check_one_gpu_per_job(opts: LaunchOptions) -> None:
    """A run is one process on one GPU: a job with two would leave one idle. The gres
    and the architecture are read here, before anything loads."""
    if opts.slurm_gpus is not None and opts.slurm_gres is not None:
        raise UserError(
            "--slurm-gpus and --slurm-gres both ask for GPUs; give one of them "
            "(--slurm-gres gpu:<type>:1 also names the GPU type)."
        )
    check_gpu_arch(opts.slurm_gpu_arch)
    if (opts.slurm_gpus or 0) > 1 or (opts.slurm_gres and parse_gres(opts.slurm_gres).count > 1):
        raise UserError(
            "Each run of a grid is one process on one GPU, so a job with more "
            "than one would leave the others idle. Ask for 1 GPU per job; to use "
            "more GPUs at once, raise --slurm-array-parallelism (more jobs run "
            "side by side)."
        )


def slurm_cluster() -> str:
    """The submitit cluster behind ``--launcher slurm``. The one seam the tests
    replace, with ``"local"``: submitit's LocalExecutor on this machine."""
    missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
    if missing:
        raise UserError(
            f"--launcher slurm submits through submitit with sbatch and srun, but "
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on "
            "PATH here. Run the command on a SLURM login node (where `sbatch "
            "--version` works), or use --launcher local --jobs N on this machine."
        )
    return "slurm"


def probe_controller() -> None:
    """Ask the SLURM controller for this user's jobs before anything is planned or
    written. With sbatch on PATH but no controller answering (a machine outside the
    cluster, slurmctld down or unreachable), submitit's sbatch would fail only after
    the data loaded and the grid was recorded. Without squeue there is nothing to ask;
    a failing sbatch is then still one paragraph (:func:`submit`)."""
    if shutil.which("squeue") is None:
        return
    fix = (
        "Run the command on a login node of the cluster, where `squeue` answers; check "
        "that the controller is up (`scontrol ping`); or use --launcher local --jobs N "
        "on this machine. Nothing was written."
    )
    try:
        done = subprocess.run(
            ["squeue", "--noheader", "--format=%i", f"--user={os.getuid()}"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            f"--launcher slurm: the SLURM controller did not answer `squeue` within "
            f"{PROBE_TIMEOUT_S:g} s. {fix}"
        ) from None
    except OSError as e:
        raise UserError(f"--launcher slurm: `squeue` cannot be run ({e.strerror}). {fix}") from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())[:300] or f"exit {done.returncode}"
        raise UserError(
            f"--launcher slurm: the SLURM controller does not answer here (`squeue` "
            f"failed: {said}). {fix}"
        )
