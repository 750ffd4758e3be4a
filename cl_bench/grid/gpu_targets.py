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

The plan also counts on the GPU's memory: the memory estimate is checked against it
before the jobs are submitted (:func:`planned_budget`), not only inside each job after
its wait in the queue. A type sold in several sizes counts as its smallest card (an
``a100`` as 40 GB, not 80) unless its name says which (``gpu:a100_80gb:1``, or
``--slurm-gpu-arch a100-80gb``): a plan refused that would fit is put right by naming
the card; a plan accepted that cannot fit would fail only after the queue. With only an
architecture (``sm_80``), its smallest card in :data:`cl_bench.engine.gpu.GPU_TYPES`
counts; with neither known, each job's own check is the only one.
"""

from __future__ import annotations

import shutil
import subprocess
from multiprocessing.queues import Queue
from typing import NamedTuple

import torch

from cl_bench.engine import gpu
from cl_bench.engine.memory import GB, Budget
from cl_bench.errors import UserError
from cl_bench.grid.gres import parse_gres

_WORKER_GPU: list[int] = []  # the GPU index this worker process claimed (empty: none)


def local_gpus(planned_arch: str) -> list[int]:
    """The indices of this machine's GPUs of the planned architecture."""
    return [
        i
        for i in range(torch.cuda.device_count())
        if gpu.arch_name(torch.cuda.get_device_capability(i)) == planned_arch
    ]


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
        [f"--partition={partition}"] if partition else []
    )
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return (
        [g for line in done.stdout.split() for g in line.split(",") if g.startswith("gpu")]
        if done.returncode == 0
        else []
    )


class PlannedGpu(NamedTuple):
    """The GPU a SLURM plan counts on for its jobs: its architecture, and its memory
    in GB with where that comes from (None: no GPU type named, so the memory is known
    only on the node, where each job checks its own GPU)."""

    arch: str
    memory_gb: int | None = None
    why: str = ""


def check_gpu_arch(text: str | None) -> None:
    """``--slurm-gpu-arch``: an architecture (sm_80) or a GPU type the table knows."""
    if text is None or gpu.is_arch(text) or gpu.gpu_type(text):
        return
    raise UserError(
        f"--slurm-gpu-arch {text} is neither a GPU architecture nor a GPU type "
        "cl-bench knows. Give the architecture as sm_ followed by the compute "
        "capability's major and minor digits (sm_75 for a T4, sm_80 for an A100, "
        "sm_86 for an A40, sm_90 for an H100, sm_100 for a B200), or a GPU type, "
        "with the memory of its cards where it comes in several sizes "
        "(a100-80gb): "
        f"{', '.join(gpu.GPU_TYPES)}."
    )


def type_memory(name: str, arch: str, source: str) -> tuple[int, str] | None:
    """The memory of the GPU type ``name`` of the plan's architecture, and why: what
    the name states, else the smallest card the type is sold with."""
    known = gpu.gpu_type(name)
    stated = gpu.stated_memory_gb(name)
    if stated is not None and (known is None or known.arch == arch):
        return stated, f"{source} names {name}: {stated} GB cards"
    if known is None or known.arch != arch:
        return None
    if len(known.memory_gb) == 1:
        return known.memory_gb[0], f"{source} names {name}: {known.memory_gb[0]} GB cards"
    sizes = " or ".join(map(str, known.memory_gb))
    return known.memory_gb[0], (
        f"{source} names {name}, counted as its smallest card: {name} cards have {sizes} GB; "
        f"where the jobs get larger ones, say so with --slurm-gpu-arch "
        f"{name}-{known.memory_gb[-1]}gb"
    )


def arch_memory(arch: str) -> tuple[int, str] | None:
    """The smallest card of architecture ``arch`` in the table, and why it counts."""
    cards = sorted((t.memory_gb[0], name) for name, t in gpu.GPU_TYPES.items() if t.arch == arch)
    if not cards:
        return None
    return cards[0][0], (
        f"--slurm-gpu-arch {arch} names no GPU type, so the smallest {arch} "
        f"card counts: {cards[0][1]}, {cards[0][0]} GB; name the type "
        f"instead, e.g. --slurm-gpu-arch {cards[-1][1]}"
    )


def slurm_gpu(gres: str | None, arch: str | None, partition: str | None) -> PlannedGpu:
    """The GPU the SLURM jobs will get, or a UserError naming how to say. Its
    architecture comes from ``--slurm-gpu-arch`` (sm_80, or a type: a100), else the type
    in ``--slurm-gres``, else ``sinfo`` (:func:`sinfo_gpu`); its memory from the first
    of those types of that architecture (:func:`type_memory`), else from the smallest
    card of the architecture (:func:`arch_memory`)."""
    named = [
        (text, source)
        for text, source in (
            (arch, "--slurm-gpu-arch"),
            (parse_gres(gres).type if gres else None, f"--slurm-gres {gres}"),
        )
        if text and not gpu.is_arch(text)
    ]
    types = [found for name, _ in named if (found := gpu.gpu_type(name))]
    if arch and gpu.is_arch(arch):
        planned = arch
    elif types:
        planned = types[0].arch
    else:
        return sinfo_gpu(partition)
    sized = [m for name, source in named if (m := type_memory(name, planned, source))]
    return PlannedGpu(planned, *(sized[0] if sized else arch_memory(planned) or (None, "")))


def sinfo_gpu(partition: str | None) -> PlannedGpu:
    """The GPU of the partition's nodes as sinfo lists them, when they share one
    architecture (its smallest card counts), or a UserError naming how to say."""
    listed = sinfo_gres(partition)
    types = sorted({g.split("(")[0] for g in listed})
    archs = {gpu.arch_of_gpu_type(g) for g in types}
    if len(archs) != 1 or None in archs:
        seen = f" (sinfo lists: {', '.join(sorted(set(listed)))})" if listed else ""
        raise UserError(
            "A SLURM job's GPU architecture is part of every result's key and "
            "decides bf16 or fp16, but this command does not say which GPUs the "
            f"jobs get{seen}. Name the type with --slurm-gres gpu:<type>:1 (e.g. "
            "gpu:a100:1), or the architecture with --slurm-gpu-arch (e.g. sm_80); "
            "nothing was submitted."
        )
    arch = archs.pop()
    return PlannedGpu(arch, *min(type_memory(g.split(":")[1], arch, "sinfo") for g in types))


def planned_budget(planned: PlannedGpu) -> Budget | None:
    """The GPU budget of the memory estimate for jobs on ``planned`` GPUs: the memory
    of the card the plan counts on (in GB of 1e9 bytes, below what the card has); None
    when no type says it, and each job checks its own GPU before it runs."""
    if planned.memory_gb is None:
        return None
    why = planned.why.replace("{", "{{").replace("}", "}}")
    return Budget(
        planned.memory_gb * GB,
        False,
        "of GPU memory",
        f"the jobs' GPU has {{}} ({why})",
        "a GPU type with more memory, e.g. --slurm-gres gpu:h200:1",
    )


def check_node_gpu(device: torch.device, planned: dict | None) -> None:
    """Refuse to run on a node whose GPU is not the planned one (a mixed partition):
    its numbers would be filed under another architecture's key."""
    if planned is None or device.type != "cuda":
        return
    have = gpu.arch_name(torch.cuda.get_device_capability(device))
    if have != planned["arch"]:
        raise UserError(
            f"This node's {torch.cuda.get_device_name(device)} is {have}, but the "
            f"grid was planned for {planned['arch']} GPUs. Ask SLURM for that type "
            "(--slurm-gres gpu:<type>:1, or a partition with one GPU type), or "
            "plan again with the matching --slurm-gpu-arch."
        )
