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

import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from cl_bench.contract.loading import usable_cpus
from cl_bench.engine.runner import (
    RunRequest,
    check_request,
    describe,
    done_line,
    load_shared,
    plan_runs,
)
from cl_bench.grid.gpu_targets import claim_gpu, local_gpus
from cl_bench.grid.options import LaunchOptions, poll_s
from cl_bench.grid.slurm import SubmissionRefused, logs_of, submit, wait
from cl_bench.grid.target import check_plan_memory, worker_target
from cl_bench.grid.undo import Before
from cl_bench.grid.worker import Job, Outcome, work
from cl_bench.store import results
from cl_bench.store.records import Result

Echo = Callable[[str], None]


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
    out: Path | None = None  # the results folder the records were read from

    @property
    def results(self) -> list[Result]:
        """The finished runs as :class:`~cl_bench.store.records.Result`, planned order."""
        return [Result.from_run(record, self.out) for record in self.records]

    @property
    def unfinished(self) -> int:
        """Runs that failed, were interrupted or are left pending: the next call runs them."""
        return len(self.failed) + len(self.interrupted) + len(self.pending)

    def counts(self) -> str:
        """``3 done, 1 failed``: what became of the grid's runs, in one line."""
        counts = {
            "done": len(self.records),
            "failed": len(self.failed),
            "interrupted": len(self.interrupted),
            "running elsewhere": len(self.running),
            "pending": len(self.pending),
            "queued": self.queued,
        }
        return ", ".join(f"{n} {what}" for what, n in counts.items() if n or what == "done")


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
    grid, todo = GridResult(out=out), []
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
        opts.jobs or (len(gpus) if gpus else usable_cpus() if device == "cpu" else 1), len(todo)
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
