"""What a grid's worker process runs: one job (one method x scenario x seed) under its
run's lock, with data and backbone loaded in the worker (and reused across the jobs of a
pool worker), the plan re-checked against what the worker loaded, and SLURM's time limit
recorded as what it means."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from submitit.helpers import Checkpointable

from cl_bench.cards.card import Card
from cl_bench.cards.strategy import make_importable
from cl_bench.engine.environment import make_deterministic, resolve_device
from cl_bench.engine.memory import check_memory
from cl_bench.engine.runner import RunRequest, Shared, load_shared, resolved_config, run_one
from cl_bench.errors import UserError
from cl_bench.grid.gpu_targets import check_node_gpu, worker_device
from cl_bench.store import results


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
            req.validation,
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
        req.log,
        config_file=req.config_file,
    )
