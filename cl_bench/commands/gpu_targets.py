"""Which GPU each worker of a grid runs on, and which GPU a SLURM job will get.

Local: ``--launcher local --jobs N`` on a node with G GPUs gives worker k GPU
``k mod G`` (of the GPUs with the planned architecture): each worker claims a slot
when its process starts (:func:`claim_gpu`), so N workers on an N-GPU node never
share ``cuda:0``. An explicit ``--device cuda:K`` puts every worker on GPU K.

SLURM: a job's GPU is only known on its node, but its architecture is part of every
result's key and decides bf16 or fp16, so the plan takes it from what the request
names (``--slurm-gpu-arch``, the type in ``--slurm-gres gpu:<type>:1``) or from what
``sinfo`` says the partition has; the worker checks its node's GPU against the plan
before it runs (:func:`check_node_gpu`).
"""

from __future__ import annotations

import shutil
import subprocess
from multiprocessing.queues import Queue

import torch

from cl_bench.engine import gpu
from cl_bench.errors import UserError

_WORKER_GPU: list[int] = []  # the GPU index this worker process claimed (empty: none)


def local_gpus(planned_arch: str) -> list[int]:
    """The indices of this machine's GPUs of the planned architecture."""
    return [i for i in range(torch.cuda.device_count())
            if gpu.arch_name(torch.cuda.get_device_capability(i)) == planned_arch]


def claim_gpu(slots: Queue, gpus: list[int]) -> None:
    """Pool initializer: this worker takes the next slot k and runs on ``gpus[k mod G]``."""
    _WORKER_GPU[:] = [gpus[slots.get() % len(gpus)]]


def worker_device(requested: str) -> str:
    """The device this worker runs a job on: its claimed GPU when the plan says
    ``cuda`` without an index, else what was asked."""
    if requested == "cuda" and _WORKER_GPU:
        return f"cuda:{_WORKER_GPU[0]}"
    return requested


def sinfo_gres(partition: str | None) -> list[str]:
    """The gres of the partition's nodes as ``sinfo`` prints them (``gpu:a100:4``), or
    none when sinfo is missing or fails."""
    if shutil.which("sinfo") is None:
        return []
    command = ["sinfo", "--noheader", "--format=%G"] + (
        [f"--partition={partition}"] if partition else [])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [g for line in done.stdout.split() for g in line.split(",")
            if g.startswith("gpu")] if done.returncode == 0 else []


def slurm_gpu_arch(gres: str | None, arch: str | None, partition: str | None) -> str:
    """The architecture the SLURM jobs' GPUs will have, or a UserError naming how to say."""
    if arch:
        if not arch.startswith("sm_") or not arch[3:].isdigit():
            raise UserError(f"--slurm-gpu-arch {arch}: give the architecture as sm_XY, e.g. "
                            "sm_80 (A100), sm_90 (H100), sm_70 (V100).")
        return arch
    if found := gpu.arch_of_gpu_type(gres):
        return found
    listed = sinfo_gres(partition)
    archs = {gpu.arch_of_gpu_type(g.split("(")[0]) for g in listed}
    if len(archs) == 1 and None not in archs:
        return archs.pop()
    seen = f" (sinfo lists: {', '.join(sorted(set(listed)))})" if listed else ""
    raise UserError("A SLURM job's GPU architecture is part of every result's key and decides "
                    "bf16 or fp16, but this command does not say which GPUs the jobs get"
                    f"{seen}. Name the type with --slurm-gres gpu:<type>:1 (e.g. gpu:a100:1), "
                    "or the architecture with --slurm-gpu-arch (e.g. sm_80); nothing was "
                    "submitted.")


def check_node_gpu(device: torch.device, planned: dict | None) -> None:
    """Refuse to run on a node whose GPU is not the planned one (a mixed partition):
    its numbers would be filed under another architecture's key."""
    if planned is None or device.type != "cuda":
        return
    have = gpu.arch_name(torch.cuda.get_device_capability(device))
    if have != planned["arch"]:
        raise UserError(f"This node's {torch.cuda.get_device_name(device)} is {have}, but the "
                        f"grid was planned for {planned['arch']} GPUs. Ask SLURM for that type "
                        "(--slurm-gres gpu:<type>:1, or a partition with one GPU type), or "
                        "plan again with the matching --slurm-gpu-arch.")
