"""What a SLURM plan reads from the command before anything is submitted: the GPU
architecture (`--slurm-gpu-arch`: sm_XY or a GPU type), the gres (`gpu[:type][:count]`,
a count of at least 1) and the memory of the GPU type the jobs get, which the memory
estimate is checked against before the jobs wait in the queue. Each bad case is one
paragraph, exit 2, nothing written, sbatch never called (fake SLURM tools on PATH log
their calls)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cl_bench.cards.catalogue import load_method, load_scenario
from cl_bench.engine import gpu, memory
from cl_bench.errors import UserError
from cl_bench.grid.gpu_targets import PlannedGpu, planned_budget, slurm_gpu
from cl_bench.grid.gres import Gres, parse_gres
from tests.helpers.cli import invoke, refused

RUN = [
    "--scenario",
    "synthetic",
    "--methods",
    "simplecil",
    "--backbone",
    "efficientnet_lite0",
    "--image-size",
    "32",
    "--no-progress",
    "--launcher",
    "slurm",
    "--no-wait",
]
RANPAC = [
    "--scenario",
    "synthetic",
    "--methods",
    "ranpac",
    "--set",
    "ranpac.M=50000",
    "--no-progress",
    "--launcher",
    "slurm",
    "--no-wait",
]  # 60 GB of Gram matrices on the GPU


@pytest.fixture
def slurm(tmp_path, monkeypatch) -> Path:
    """sbatch, srun and squeue on PATH that log their calls; sbatch accepts. Returns
    the call log."""
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in {
        "sbatch": 'echo "Submitted batch job 4242"',
        "srun": "exit 1",
        "squeue": "exit 0",
    }.items():
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n{body}\n')
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def submitted(calls: Path) -> list[str]:
    return [line.split()[0] for line in calls.read_text().splitlines()] if calls.exists() else []


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
@pytest.mark.parametrize("arch", ["sm_8", "sm_080", "sm_90a", "ampere"])
def test_a_bad_architecture_is_refused_with_the_accepted_forms(tmp_path, slurm, arch, dry):
    """sm_8 passed the old check (digits after sm_) and ended in a ValueError traceback in
    gpu.arch_capability."""
    out = tmp_path / "out"
    result = invoke(
        "run", "--out", str(out), *RUN, "--slurm-gpus", "1", "--slurm-gpu-arch", arch, *dry
    )
    refused(
        result,
        f"--slurm-gpu-arch {arch} is neither a GPU architecture nor a GPU type "
        "cl-bench knows. Give the architecture as sm_ followed by the compute "
        "capability's major and minor digits (sm_75 for a T4, sm_80 for an A100",
        out,
    )
    assert "a100-80gb" in result.stderr and "h100" in result.stderr
    assert "sbatch" not in submitted(slurm)


def test_architectures_and_gpu_types():
    assert [gpu.is_arch(a) for a in ("sm_75", "sm_80", "sm_100", "sm_120")] == [True] * 4
    assert [gpu.is_arch(a) for a in ("sm_8", "sm_", "sm_080", "sm_90a", "sm_1000")] == [False] * 5
    assert gpu.arch_capability("sm_100") == (10, 0)
    with pytest.raises(ValueError, match="not a GPU architecture: 'sm_8'"):
        gpu.arch_capability("sm_8")
    assert [
        gpu.gpu_type(n).arch
        for n in ("A100", "a100_80gb", "a100-sxm4-80gb", "a100_3g.40gb", "rtx_3090")
    ] == ["sm_80"] * 4 + ["sm_86"]
    assert gpu.gpu_type("1g.10gb") is None and gpu.stated_memory_gb("1g.10gb") == 10
    assert [gpu.stated_memory_gb(n) for n in ("a100", "a100_80gb", "v100-32g", "l4")] == [
        None,
        80,
        32,
        None,
    ]


@pytest.mark.parametrize(
    "gres", ["gpu:a100:0", "gpu:a100:-1", "gpu:0", "gpu:-1", "gpu:a100:x", "gpu:a100:1.5"]
)
@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_a_gres_count_below_one_or_not_a_whole_number_is_refused(tmp_path, slurm, gres, dry):
    """gpu:a100:0 was planned as a CUDA run and handed to sbatch as --gres=gpu:a100:0;
    gpu:a100:-1 was read as one GPU."""
    out = tmp_path / "out"
    refused(
        invoke("run", "--out", str(out), *RUN, "--slurm-gres", gres, *dry),
        f"--slurm-gres {gres} asks for {gres.rsplit(':', 1)[1]} GPUs: the count, the last "
        "field, must be a whole number of at least 1",
        out,
    )
    assert "sbatch" not in submitted(slurm)


@pytest.mark.parametrize(
    ("gres", "needle"),
    [
        ("lscratch:200", "asks for no GPU"),
        ("gpu:a100:1,gpu:h100:1", "more than once"),
        ("gpu::1", "has an empty field"),
        ("gpu:a100:1:2", "has more fields than"),
    ],
)
def test_a_gres_without_one_gpu_part_is_refused(gres, needle):
    with pytest.raises(UserError, match=needle):
        parse_gres(gres)


def test_the_gpu_part_of_a_gres():
    assert parse_gres("gpu:a100:1") == Gres("a100", 1)
    assert parse_gres("gpu:a100:1,lscratch:200") == Gres("a100", 1)
    assert parse_gres("gpu:2") == Gres(None, 2)
    assert parse_gres("gpu:h100") == Gres("h100", 1)
    assert parse_gres("gpu") == Gres(None, 1)


@pytest.mark.parametrize(
    ("gres", "arch", "want"),
    [
        (
            "gpu:a100:1",
            None,
            PlannedGpu(
                "sm_80",
                40,
                "--slurm-gres gpu:a100:1 names a100, counted "
                "as its smallest card: a100 cards have 40 or 80 GB; where "
                "the jobs get larger ones, say so with --slurm-gpu-arch "
                "a100-80gb",
            ),
        ),
        (
            "gpu:a100_80gb:1",
            None,
            PlannedGpu("sm_80", 80, "--slurm-gres gpu:a100_80gb:1 names a100_80gb: 80 GB cards"),
        ),
        (
            "gpu:a100:1",
            "a100-80gb",
            PlannedGpu("sm_80", 80, "--slurm-gpu-arch names a100-80gb: 80 GB cards"),
        ),
        (
            "gpu:1g.10gb:1",
            "sm_80",
            PlannedGpu("sm_80", 10, "--slurm-gres gpu:1g.10gb:1 names 1g.10gb: 10 GB cards"),
        ),
        (
            None,
            "sm_80",
            PlannedGpu(
                "sm_80",
                24,
                "--slurm-gpu-arch sm_80 names no GPU type, so the "
                "smallest sm_80 card counts: a30, 24 GB; name the type instead, "
                "e.g. --slurm-gpu-arch a100",
            ),
        ),
        (None, "sm_120", PlannedGpu("sm_120", None, "")),
    ],
)
def test_the_gpu_a_plan_counts_on(gres, arch, want):
    assert slurm_gpu(gres, arch, None) == want


def test_sinfo_types_count_as_their_smallest_card(tmp_path, monkeypatch):
    sinfo = tmp_path / "sinfo"
    sinfo.write_text("#!/bin/sh\necho 'gpu:h100:8(S:0-1)'\necho 'gpu:h200:4'\n")
    sinfo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    found = slurm_gpu("gpu:1", None, "gpu")
    assert (found.arch, found.memory_gb) == ("sm_90", 80)
    assert found.why.startswith("sinfo names h100, counted as its smallest card")


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_a_setting_that_cannot_fit_the_planned_gpu_is_refused_before_submitting(
    tmp_path, slurm, dry
):
    """Before, the GPU budget was checked only inside each job, after its wait in the
    queue: this plan was submitted."""
    out = tmp_path / "out"
    result = invoke("run", "--out", str(out), *RANPAC, "--slurm-gres", "gpu:a100:1", *dry)
    refused(
        result,
        "A run of ranpac needs at least 61.7 GB of GPU memory, but the jobs' GPU "
        "has 40.0 GB (--slurm-gres gpu:a100:1 names a100, counted as its smallest "
        "card: a100 cards have 40 or 80 GB; where the jobs get larger ones, say so "
        "with --slurm-gpu-arch a100-80gb). The largest parts: the Gram matrix and "
        "its ridge solve (3 x 50000^2 float64): 60.0 GB (set by ranpac.M);",
        out,
    )
    assert result.stderr.endswith(
        "Lower ranpac.M (or run on a GPU type with more memory, e.g. --slurm-gres "
        "gpu:h200:1); nothing was run or written.\n"
    )
    assert "sbatch" not in submitted(slurm)


def test_naming_the_larger_card_lets_the_plan_through(tmp_path, slurm):
    out = tmp_path / "out"
    result = invoke(
        "run",
        "--out",
        str(out),
        *RANPAC,
        "--slurm-gres",
        "gpu:a100:1",
        "--slurm-gpu-arch",
        "a100-80gb",
        "--dry-run",
    )
    assert result.exit_code == 0, result.output
    assert "cuda/bf16" in result.stdout and "1 runs planned: 0 done, 1 pending" in result.stdout


def test_the_planned_gpu_refusal_names_activation_checkpointing():
    """L2P at batch 512 in fp16 on a T4: the training step is the largest part, and L2P
    can recompute ViT blocks in its backward pass instead of keeping them."""
    card = load_method("l2p")
    card.params["batch_size"] = 512
    budget = planned_budget(slurm_gpu("gpu:t4:1", None, None))
    with pytest.raises(UserError) as found:
        memory.check_memory(
            [card],
            load_scenario("imagenet-r"),
            "vit_base_patch16_224",
            None,
            "cuda",
            precision="fp16",
            limits=[budget],
        )
    assert found.value.paragraph().endswith(
        "the jobs' GPU has 16.0 GB (--slurm-gres gpu:t4:1 names t4: 16 GB cards). The largest "
        "part: a training batch of 512 images at 224 px and what its backward pass keeps (12 "
        "ViT blocks x 222 tokens): 20.3 GB (set by l2p.batch_size). Lower l2p.batch_size, "
        "raise l2p.checkpoint_blocks (now 0, at most 12: those ViT blocks are recomputed in "
        "the backward pass instead of kept), or run on a GPU type with more memory, e.g. "
        "--slurm-gres gpu:h200:1; nothing was run or written."
    )
    card.params["batch_size"] = 128
    memory.check_memory(
        [card],
        load_scenario("imagenet-r"),
        "vit_base_patch16_224",
        None,
        "cuda",
        precision="fp16",
        limits=[budget],
    )
