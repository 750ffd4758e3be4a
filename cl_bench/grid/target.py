"""Where a grid's workers run (device, precision, threads per worker, the device's part of
every result key) and the memory check of a plan before anything loads."""

from __future__ import annotations

from typing import NamedTuple

import torch

from cl_bench.cards.card import Card
from cl_bench.contract.loading import usable_cpus
from cl_bench.engine import gpu
from cl_bench.engine.environment import (
    check_device_name,
    check_precision_name,
    cuda_precision,
    device_key,
    gpu_key,
    resolve_device,
    resolve_precision,
)
from cl_bench.engine.memory import Budget, check_memory
from cl_bench.engine.runner import RunRequest
from cl_bench.errors import UserError
from cl_bench.grid.gpu_targets import planned_budget, slurm_gpu
from cl_bench.grid.options import LaunchOptions


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
        jobs = opts.jobs or (usable_cpus() if device.type == "cpu" else gpus)
        return Target(
            device.type if device.index is None else str(device),
            resolve_precision(req.precision, device),
            req.threads or max(1, usable_cpus() // jobs),
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
