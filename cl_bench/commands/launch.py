"""Send a grid's runs to worker processes: on this machine or on SLURM.

One job is one method x scenario x seed. The parent validates the whole grid
first (names, ``--set``, data, weights: a bad command writes nothing), plans
every result path, records the grid (``<out>/runs/_grids/``) and submits only the
runs that are neither finished nor running elsewhere. Each worker loads data
and backbone itself, takes the run's lock, checks that its own backbone and
data give the planned result path, and calls the single-run code path
(:func:`cl_bench.engine.runner.run_one`); features come from the shared on-disk
cache. What a worker hands back serves only the progress lines; what counts
is in the results folder, so a killed parent, worker or node loses nothing
but the runs in flight, and the same command resumes the grid.

Engines: ``slurm`` is submitit (one job array, ``--slurm-array-parallelism``
caps how many run at once). ``local`` is the standard library's process pool
with ``--jobs`` workers, not submitit's LocalExecutor: that one starts every
job at once, with no cap; it serves as the stand-in for SLURM in the tests,
where it runs the same submitit code path (pickles, job folders, results).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import multiprocessing
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import torch
from submitit.helpers import Checkpointable

from cl_bench.cards.card import Card
from cl_bench.cards.strategy import make_importable
from cl_bench.commands.gpu_targets import (
    check_gpu_arch,
    check_node_gpu,
    claim_gpu,
    local_gpus,
    planned_budget,
    slurm_gpu,
    worker_device,
)
from cl_bench.commands.gres import parse_gres
from cl_bench.commands.undo import Before
from cl_bench.engine import gpu
from cl_bench.engine.environment import (
    check_device_name,
    check_precision_name,
    cuda_precision,
    device_key,
    gpu_key,
    make_deterministic,
    resolve_device,
    resolve_precision,
)
from cl_bench.engine.memory import Budget, check_memory
from cl_bench.engine.runner import (
    RunRequest,
    Shared,
    check_request,
    describe,
    done_line,
    load_shared,
    plan_runs,
    resolved_config,
    run_one,
)
from cl_bench.errors import UserError, unknown
from cl_bench.store import results

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


Echo = Callable[[str], None]


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


@dataclass(frozen=True)
class Job:
    """One run as a worker receives it. Plain data (cards are parsed YAML), a few kB
    pickled; the cards travel resolved, so a job that waits in a queue runs what was
    planned even if a card file changes meanwhile."""

    req: RunRequest  # device and precision resolved for the worker, paths absolute
    method: Card
    scenario: Card
    seed: int
    path: Path
    device_key: dict | None = None  # the planned device (engine.environment.device_key)

    @property
    def name(self) -> str:
        return f"{self.scenario.name}/{self.method.name}"

    @property
    def label(self) -> str:
        return f"{self.name} seed {self.seed}"


@dataclass(frozen=True)
class Outcome:
    """What a worker reports back: ``ran``, ``done`` (finished meanwhile) or ``running``
    (held elsewhere). The result itself is read from the results folder."""

    state: str
    holder: dict | None = None


_SHARED: dict[str, Shared] = {}  # a pool worker reuses data and backbone across its jobs


class TimeLimitReached(UserError):
    """A SLURM job reached its time limit without --slurm-requeue."""


def work(job: Job) -> Outcome:
    """The worker's entry point (pickled by reference into every job)."""
    attempt = results.run_once(job.path, functools.partial(_compute_in_time, job))
    return Outcome(attempt.state, attempt.holder)


def _compute_in_time(job: Job) -> dict:
    """:func:`_compute`, with submitit's "timed-out and not checkpointable" (raised from
    its signal handler shortly before SLURM's time limit) recorded as what it means."""
    from submitit.core.utils import UncompletedJobError

    try:
        return _compute(job)
    except UncompletedJobError as e:
        if "timed-out" not in str(e):
            raise
        raise TimeLimitReached(
            "timed out: the SLURM job reached its --slurm-time before the run finished; run "
            "the same command again with a larger --slurm-time, or with --slurm-requeue to "
            "requeue it and resume from its last finished task"
        ) from None


class Requeued(Checkpointable):
    """:func:`work` as a submitit Checkpointable (``--slurm-requeue``): when SLURM
    preempts the job or it reaches its time limit, submitit calls ``checkpoint(job)``,
    which resubmits the same call, and requeues the job; the requeued job resumes the
    run from its last per-task checkpoint (:mod:`cl_bench.engine.checkpoint`)."""

    def __call__(self, job: Job) -> Outcome:
        return work(job)


def _compute(job: Job) -> dict:
    """Runs under the run's lock: load (or reuse) data and backbone, re-check the
    plan, train and evaluate."""
    req = job.req
    make_importable(job.method)  # a strategy beside its card, in a process of its own
    device = resolve_device(worker_device(req.device))
    make_deterministic(req.threads, req.deterministic, device)
    check_node_gpu(device, job.device_key)
    key = json.dumps(
        [
            req.backbone,
            req.weights,
            req.image_size,
            str(req.data_root),
            req.download,
            req.device,
            req.precision,
            job.scenario.name,
            job.scenario.params,
        ],
        sort_keys=True,
        default=str,
    )
    if key not in _SHARED:
        _SHARED.clear()
        if device.type == "cuda":  # the GPU's free memory, as this process sees it
            check_memory(
                [job.method],
                job.scenario,
                req.backbone,
                req.image_size,
                "cuda",
                device=device,
                precision=req.precision,
            )
        _SHARED[key] = load_shared(req, job.scenario, [job.method], device, req.precision)
    shared = _SHARED[key]
    config = resolved_config(
        job.method,
        job.scenario,
        shared.backbone,
        req.precision,
        shared.data,
        shared.store.device_key,
    )
    path = results.run_path(req.out, job.scenario.name, job.method.name, job.seed, config)
    if path != job.path:
        raise UserError(
            f"{job.label}: this worker's backbone weights or data differ from those "
            f"the grid was planned with (result {path.name}, planned "
            f"{job.path.name}). Make the same weights and data visible to every "
            "node, or re-run the command to plan again."
        )
    return run_one(
        job.method,
        job.scenario,
        shared.data,
        shared.backbone,
        shared.store,
        job.seed,
        device,
        req.progress,
        job.path,
    )


def usable_cores() -> int:
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


class Target(NamedTuple):
    """Where a grid's workers run: device (``cpu``, ``cuda``: each worker its own GPU,
    or ``cuda:K``), precision, torch threads per worker, the device's part of every
    result key (:func:`~cl_bench.engine.environment.device_key`), and for SLURM jobs
    on GPUs the memory of the GPU the plan counts on (None: not known here)."""

    device: str
    precision: str
    threads: int | None
    device_key: dict | None
    gpu_budget: Budget | None = None


def worker_target(req: RunRequest, opts: LaunchOptions) -> Target:
    """Device, precision, threads and device key of the workers. SLURM workers run on
    other machines, so ``auto`` is decided from the request (``--slurm-gpus`` or
    ``--slurm-gres``) and the GPU architecture from what it names, not from this login
    node; both are part of each result's path, hence fixed here and checked on the node."""
    if opts.launcher == "local":
        device = resolve_device(req.device)
        gpus = torch.cuda.device_count() if device.type == "cuda" and device.index is None else 1
        jobs = opts.jobs or (usable_cores() if device.type == "cpu" else gpus)
        return Target(
            device.type if device.index is None else str(device),
            resolve_precision(req.precision, device),
            req.threads or max(1, usable_cores() // jobs),
            device_key(device, req.deterministic),
        )
    if req.device not in ("auto", "cpu", "cuda"):
        check_device_name(req.device)
        raise UserError(
            f"--device {req.device} names a GPU of this machine; a SLURM job gets "
            "its GPUs from SLURM: use --device cuda (or auto) with --slurm-gres."
        )
    wants_gpu = bool(opts.slurm_gpus or opts.slurm_gres)
    device = req.device if req.device != "auto" else "cuda" if wants_gpu else "cpu"
    if device == "cuda" and not wants_gpu:
        raise UserError(
            "--device cuda on SLURM needs GPUs in each job: add --slurm-gres "
            "gpu:<type>:1 (or --slurm-gpus 1)."
        )
    check_precision_name(req.precision)  # the nodes' hardware is not this login node's
    threads = req.threads or opts.slurm_cpus
    if device == "cpu":
        if req.precision == "fp16":
            resolve_precision("fp16", torch.device("cpu"))  # the usual refusal
        return Target(device, "fp32" if req.precision == "auto" else req.precision, threads, None)
    planned = slurm_gpu(opts.slurm_gres, opts.slurm_gpu_arch, opts.slurm_partition)
    precision = cuda_precision(
        req.precision, gpu.arch_capability(planned.arch), f"a {planned.arch} GPU"
    )
    return Target(
        device,
        precision,
        threads,
        gpu_key(planned.arch, req.deterministic),
        planned_budget(planned),
    )


def check_plan_memory(
    methods: list[Card], scenario: Card, req: RunRequest, target: Target, here: bool
) -> None:
    """The memory estimate of a plan's runs, before anything loads: against this
    machine's memory where they run here (``here``: in this process or local workers),
    against the GPU a SLURM plan counts on (:attr:`Target.gpu_budget`) before the jobs
    queue. A SLURM node's RAM is not known here; each job checks its own GPU again."""
    if here or target.gpu_budget:
        check_memory(
            methods,
            scenario,
            req.backbone,
            req.image_size,
            torch.device(target.device).type,
            precision=target.precision,
            limits=[target.gpu_budget] if target.gpu_budget else None,
        )


def plan(reqs: list[RunRequest], opts: LaunchOptions, echo: Echo) -> list[Job]:
    """Validate every scenario's request and turn it into jobs; loads each scenario's
    data and backbone once here (on the CPU) and drops them again."""
    jobs = []
    for req in reqs:
        methods, scenario = check_request(req)
        target = worker_target(req, opts)
        check_plan_memory(methods, scenario, req, target, here=opts.launcher == "local")
        device, precision, threads, key, _ = target
        req = replace(
            req,
            out=req.out.resolve(),
            progress=False,
            device=device,
            precision=precision,
            threads=threads,
            data_root=req.data_root.resolve() if req.data_root else None,
        )
        shared = load_shared(req, scenario, methods, torch.device("cpu"), precision)
        for line in describe(req, methods, scenario, shared, device, precision):
            echo(line)
        jobs += [
            Job(
                replace(req, methods=[run.card.name], seeds=[run.seed]),
                run.card,
                run.scenario,
                run.seed,
                run.path,
                key,
            )
            for run in plan_runs(
                req, methods, scenario, shared.backbone, precision, shared.data, key
            )
        ]
    return jobs


@dataclass
class GridResult:
    """Finished records (planned order) and the runs that did not finish."""

    records: list[dict] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (label, error line)
    interrupted: list[tuple[str, str]] = field(default_factory=list)
    running: list[str] = field(default_factory=list)  # computed by another invocation now
    pending: list[str] = field(default_factory=list)  # left unfinished by another invocation
    queued: int = 0  # submitted to SLURM with --no-wait


def failure_stamp(job: Job) -> tuple[int, int] | None:
    """Identifies the run's failure record: every write replaces the file (new inode),
    so a changed stamp is a new failure, whatever the clocks of nodes and file server."""
    try:
        st = results.failure_path(job.path).stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def launch(reqs: list[RunRequest], opts: LaunchOptions, echo: Echo = print) -> GridResult:
    """Plan, submit what is missing, follow it to the end, read the results back."""
    jobs = plan(reqs, opts, echo)
    out = jobs[0].req.out
    results.check_run_files(out, [j.path for j in jobs])
    before = Before(out, [results.grid_path(out, [j.path for j in jobs]).parent, logs_of(out)])
    results.write_grid(out, [j.path for j in jobs])
    grid, todo = GridResult(), []
    for job in jobs:
        lock = results.probe_lock(job.path)
        there = results.found(job.path)
        if there.state == "done":
            echo(f"  skip {job.label}: finished ({job.path})")
        elif lock and lock.held:
            echo(f"  skip {job.label}: running in {results.held_by(lock.holder)}")
        else:
            if there.state == "stale":
                echo(f"  stale {job.label}: {'; '.join(there.why)}; computing it again")
            todo.append(job)
    stamps = {job.path: failure_stamp(job) for job in todo}
    engine: Iterator[tuple[Job, Outcome | BaseException]] = iter(())
    if todo and opts.launcher == "local":
        engine = run_pool(todo, opts, echo)
    elif todo:
        try:
            submitted, cluster = submit(todo, opts, out, echo)
        except SubmissionRefused:
            before.undo()  # the grid's record and submitit's files: nothing is left
            raise
        if opts.wait:
            engine = wait(submitted, todo, poll_s(cluster), out, echo)
        else:
            grid.queued = len(todo)
    for k, (job, outcome) in enumerate(engine, 1):
        echo(f"  [{k}/{len(todo)}] {follow(job, outcome, stamps[job.path], grid)}")
    accounted = {label for label, _ in grid.failed + grid.interrupted} | (
        {job.label for job in todo} if grid.queued else set()
    )
    for job in jobs:
        if results.is_done(job.path):
            grid.records.append(results.load(job.path))
        elif (lock := results.probe_lock(job.path)) and lock.held:
            grid.running.append(job.label)
        elif job.label not in accounted:
            grid.pending.append(job.label)
    return grid


def follow(
    job: Job, outcome: Outcome | BaseException, stamp: tuple[int, int] | None, grid: GridResult
) -> str:
    """One progress line per finished job; files failures and interruptions in ``grid``
    (``stamp``: the run's failure record before the job started)."""
    if isinstance(outcome, Outcome):
        if outcome.state == "running":
            return f"skip {job.label}: running in {results.held_by(outcome.holder)}"
        if outcome.state == "done":
            return f"skip {job.label}: finished ({job.path})"
        return done_line(job.name, job.seed, results.load(job.path), job.path)
    if failure_stamp(job) != stamp and (record := results.read_failure(job.path)):
        grid.failed.append((job.label, record["error"]["last_line"]))
        return f"FAILED {job.label}: {record['error']['last_line']}"
    # ended without a word (OOM killer, a dead pool worker): pending again, not failed
    line = results.error_line(outcome)
    grid.interrupted.append((job.label, line))
    return f"INTERRUPTED {job.label}: {line}"


def run_pool(
    todo: list[Job], opts: LaunchOptions, echo: Echo
) -> Iterator[tuple[Job, Outcome | BaseException]]:
    """``--jobs`` fresh worker processes (spawned, not forked from a parent that holds a
    backbone and torch's thread pools), jobs handed out in planned order. Ctrl-C drops
    the runs not yet started instead of waiting for the whole queue."""
    device, planned = todo[0].req.device, todo[0].device_key
    gpus = local_gpus(planned["arch"]) if device == "cuda" and planned else []
    n = min(
        opts.jobs or (len(gpus) if gpus else usable_cores() if device == "cpu" else 1), len(todo)
    )
    on = f", GPUs {', '.join(f'cuda:{gpus[k % len(gpus)]}' for k in range(n))}" if gpus else ""
    echo(
        f"running {len(todo)} runs in {n} local worker processes, torch threads per "
        f"worker: {todo[0].req.threads}{on}"
    )
    context = multiprocessing.get_context("spawn")
    slots = context.Queue()
    for k in range(n):
        slots.put(k)
    pool = ProcessPoolExecutor(
        n,
        mp_context=context,
        initializer=claim_gpu if gpus else None,
        initargs=(slots, gpus) if gpus else (),
    )
    try:
        futures = {pool.submit(work, job): job for job in todo}
        for future in as_completed(futures):
            error = future.exception()
            yield futures[future], error if error is not None else future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


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

    cluster = slurm_cluster()
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
            f"not waiting: follow with `cl-bench status --out {out}`; the same command "
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
            f"stopped waiting; the jobs keep running: follow with `cl-bench status --out "
            f"{out}`, re-run the command to collect them."
        )
        raise
