"""The device a run asks for, on a machine without a GPU: GPUs are faked at the seams
torch offers (``torch.cuda.*`` and the NVIDIA device files), so that every rule about
GPUs (an unusable GPU stops ``--device auto``, ``cuda:K``, precision per architecture,
determinism, one GPU per local worker, the GPU a SLURM plan names) is checked here."""

from __future__ import annotations

import os
import queue

import pytest
import torch

from cl_bench.engine import environment, gpu
from cl_bench.engine.runner import RunRequest
from cl_bench.errors import UserError
from cl_bench.grid import gpu_targets, options, slurm
from cl_bench.grid.options import LaunchOptions, check_options
from cl_bench.grid.target import worker_target
from tests.helpers.gpus import CU130_ARCHS, fake_gpus


def test_a_cpu_machine_runs_on_the_cpu(monkeypatch):
    fake_gpus(monkeypatch, [], usable=False)
    assert environment.resolve_device("auto") == torch.device("cpu")
    with pytest.raises(UserError, match="PyTorch sees no CUDA GPU here"):
        environment.resolve_device("cuda")


def test_a_present_gpu_torch_cannot_use_stops_auto_with_the_fix(monkeypatch):
    """The old driver case: device files exist, torch's CUDA init fails. auto must not
    fall back to the CPU in silence."""
    fake_gpus(monkeypatch, [], usable=False, present=2)
    with pytest.raises(UserError) as found:
        environment.resolve_device("auto")
    text = found.value.paragraph()
    assert "2 NVIDIA GPU(s)" in text and "driver on your system is too old" in text
    assert "cu126" in text and "--device cpu" in text and "\n" not in text


def test_a_gpu_without_kernels_in_the_build_is_refused(monkeypatch):
    """The locked CUDA 13 build has no sm_70 kernels: a V100 cannot run it."""
    fake_gpus(monkeypatch, [(7, 0)], names=["Tesla V100-SXM2-32GB"])
    with pytest.raises(UserError, match=r"GPU 0 \(sm_70\) has no kernels in torch") as found:
        environment.resolve_device("auto")
    assert "sm_75, sm_80" in str(found.value) and "cu126" in str(found.value)


@pytest.mark.parametrize(
    ("cap", "archs", "runs"),
    [
        ((9, 0), ("sm_80", "sm_90"), True),
        ((8, 6), ("sm_80",), True),  # same major, higher minor: the sm_80 cubin runs
        ((8, 0), ("sm_86",), False),  # a newer minor's cubin does not run on an older GPU
        ((7, 0), CU130_ARCHS, False),
        ((12, 1), CU130_ARCHS, True),  # sm_120 cubin, and compute_120 PTX
        ((13, 0), ("sm_90", "compute_90"), True),  # PTX is compiled for newer GPUs
        ((10, 0), ("sm_90a",), False),
    ],
)
def test_which_builds_run_on_which_gpus(cap, archs, runs):
    assert gpu.runs_on(cap, archs) is runs


def test_cuda_k_is_gpu_k(monkeypatch):
    fake_gpus(monkeypatch, [(9, 0), (9, 0)])
    assert environment.resolve_device("cuda:1") == torch.device("cuda:1")
    assert environment.resolve_device("auto") == torch.device("cuda")
    with pytest.raises(UserError, match=r"has 2 GPU\(s\) that torch sees \(cuda:0 to cuda:1\)"):
        environment.resolve_device("cuda:2")
    with pytest.raises(UserError, match="cuda:K"):
        environment.resolve_device("gpu1")


@pytest.mark.parametrize(
    ("asked", "cap", "want"),
    [
        ("auto", (9, 0), "bf16"),
        ("auto", (8, 0), "bf16"),
        ("auto", (7, 5), "fp16"),
        ("auto", (7, 0), "fp16"),
        ("fp32", (7, 5), "fp32"),
        ("fp16", (9, 0), "fp16"),
    ],
)
def test_precision_per_gpu_architecture(asked, cap, want):
    assert environment.cuda_precision(asked, cap, "GPU") == want


def test_emulated_bf16_is_refused_on_a_gpu_and_fp16_on_the_cpu():
    with pytest.raises(UserError, match=r"Tesla T4 \(sm_75\) has no bf16 tensor cores"):
        environment.cuda_precision("bf16", (7, 5), "Tesla T4")
    with pytest.raises(UserError, match="fp16 is for CUDA GPUs"):
        environment.resolve_precision("fp16", torch.device("cpu"))
    with pytest.raises(UserError, match='Unknown precision "half"'):
        environment.check_precision_name("half")


@pytest.fixture
def torch_determinism():
    """Restore torch's global determinism switches after a test changes them."""
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.backends.cuda.flash_sdp_enabled(),
        torch.backends.cuda.mem_efficient_sdp_enabled(),
        torch.backends.cuda.cudnn_sdp_enabled(),
        os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[2], saved[3]
    torch.backends.cuda.enable_flash_sdp(saved[4])
    torch.backends.cuda.enable_mem_efficient_sdp(saved[5])
    torch.backends.cuda.enable_cudnn_sdp(saved[6])
    if saved[7] is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved[7]
    environment.make_deterministic()


def test_strict_sets_what_cuda_needs_for_bitwise_repeats(torch_determinism, monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    said = environment.make_deterministic(None, "strict", torch.device("cuda"))
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert not torch.backends.cuda.flash_sdp_enabled()
    assert not torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.math_sdp_enabled()
    assert said == {
        "mode": "strict",
        "asked": "strict",
        "device": "cuda",
        "cublas_workspace": ":4096:8",
        "attention": "math",
    }
    assert environment.determinism() == said


def test_fast_lets_cuda_pick_kernels_and_the_cpu_stays_deterministic(torch_determinism):
    said = environment.make_deterministic(None, "fast", torch.device("cuda"))
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.benchmark and torch.backends.cuda.flash_sdp_enabled()
    assert said["mode"] == "fast" and said["attention"] == "any"
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    on_cpu = environment.make_deterministic(None, "fast", torch.device("cpu"))
    assert on_cpu == {"mode": "strict", "asked": "fast", "device": "cpu"}
    assert torch.are_deterministic_algorithms_enabled()
    with pytest.raises(UserError, match='Unknown --deterministic "exact"'):
        environment.make_deterministic(None, "exact")


def test_the_device_key_is_absent_on_the_cpu_and_names_the_architecture_on_a_gpu(monkeypatch):
    assert environment.device_key(torch.device("cpu"), "strict") is None
    fake_gpus(monkeypatch, [(8, 0), (9, 0)])
    assert environment.device_key(torch.device("cuda:1"), "fast") == {
        "kind": "cuda",
        "arch": "sm_90",
        "deterministic": "fast",
    }
    assert environment.device_key(torch.device("cuda:0"), "strict")["arch"] == "sm_80"


def test_each_local_worker_claims_its_own_gpu():
    """What the pool's initializer does in each worker process, one after the other."""
    slots: queue.Queue = queue.Queue()
    for k in range(6):
        slots.put(k)
    seen = []
    for _ in range(6):
        gpu_targets.claim_gpu(slots, [0, 1, 3])  # GPU 2 has another architecture
        seen.append(gpu_targets.worker_device("cuda"))
    assert seen == ["cuda:0", "cuda:1", "cuda:3", "cuda:0", "cuda:1", "cuda:3"]
    assert gpu_targets.worker_device("cuda:2") == "cuda:2"  # an explicit GPU is kept
    gpu_targets._WORKER_GPU.clear()
    assert gpu_targets.worker_device("cuda") == "cuda"


def test_local_workers_default_to_one_per_gpu(monkeypatch):
    fake_gpus(monkeypatch, [(9, 0)] * 4 + [(8, 0)])
    req = RunRequest(methods=["simplecil"], scenario="synthetic", device="auto")
    found = worker_target(req, LaunchOptions(launcher="local"))
    assert found.device == "cuda" and found.precision == "bf16"
    assert found.device_key == {"kind": "cuda", "arch": "sm_90", "deterministic": "strict"}
    assert gpu_targets.local_gpus("sm_90") == [0, 1, 2, 3]
    one = worker_target(
        RunRequest(methods=["simplecil"], scenario="synthetic", device="cuda:4"),
        LaunchOptions(launcher="local"),
    )
    assert one.device == "cuda:4" and one.device_key["arch"] == "sm_80"


@pytest.mark.parametrize(
    ("opts", "arch", "precision"),
    [
        (LaunchOptions(launcher="slurm", slurm_gres="gpu:a100:1"), "sm_80", "bf16"),
        (LaunchOptions(launcher="slurm", slurm_gres="gpu:v100:1"), "sm_70", "fp16"),
        (LaunchOptions(launcher="slurm", slurm_gres="gpu:H100"), "sm_90", "bf16"),
        (LaunchOptions(launcher="slurm", slurm_gpus=1, slurm_gpu_arch="sm_75"), "sm_75", "fp16"),
    ],
)
def test_slurm_precision_is_decided_for_the_gpu_the_jobs_get(opts, arch, precision):
    found = worker_target(RunRequest(methods=["simplecil"], scenario="synthetic"), opts)
    assert (found.device, found.precision, found.device_key["arch"]) == ("cuda", precision, arch)


def test_slurm_gpus_of_an_unknown_type_are_refused_before_submitting(monkeypatch, tmp_path):
    sinfo = tmp_path / "sinfo"
    sinfo.write_text("#!/bin/sh\necho 'gpu:4(S:0-1)'\necho 'gpu:a100:8'\n")
    sinfo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(UserError, match=r"sinfo lists: gpu:4\(S:0-1\), gpu:a100:8") as found:
        worker_target(
            RunRequest(methods=["simplecil"], scenario="synthetic"),
            LaunchOptions(launcher="slurm", slurm_gpus=1),
        )
    assert "--slurm-gres gpu:<type>:1" in str(found.value)
    sinfo.write_text("#!/bin/sh\necho 'gpu:h200:8(S:0-1)'\n")
    assert (
        worker_target(
            RunRequest(methods=["simplecil"], scenario="synthetic"),
            LaunchOptions(launcher="slurm", slurm_gpus=1),
        ).device_key["arch"]
        == "sm_90"
    )


@pytest.mark.parametrize(
    ("opts", "needle"),
    [
        (LaunchOptions(launcher="slurm", slurm_gpus=2), "leave the others idle"),
        (LaunchOptions(launcher="slurm", slurm_gres="gpu:a100:2"), "leave the others idle"),
        (LaunchOptions(launcher="slurm", slurm_gpus=1, slurm_gres="gpu:a100:1"), "give one of"),
        (LaunchOptions(launcher="local", slurm_gres="gpu:a100:1"), "only apply with --launcher"),
    ],
)
def test_one_gpu_per_slurm_job(opts, needle):
    with pytest.raises(UserError, match=needle):
        check_options(opts, submitting=False)


def test_a_node_with_another_gpu_than_planned_refuses_to_run(monkeypatch):
    fake_gpus(monkeypatch, [(9, 0)], names=["NVIDIA H100"])
    planned = environment.gpu_key("sm_80", "strict")
    with pytest.raises(UserError, match="NVIDIA H100 is sm_90, but the grid was planned for sm_80"):
        gpu_targets.check_node_gpu(torch.device("cuda:0"), planned)
    gpu_targets.check_node_gpu(torch.device("cuda:0"), environment.gpu_key("sm_90", "fast"))


def test_the_gres_reaches_sbatch(monkeypatch, tmp_path):
    """submitit writes --gres into the batch file (a fake sbatch keeps it)."""
    captured = {}

    class Executor:
        def __init__(self, **kwargs) -> None:
            pass

        def update_parameters(self, **kwargs) -> None:
            captured.update(kwargs)

        def map_array(self, fn, todo):
            raise SystemExit  # nothing is submitted here

    monkeypatch.setattr(options, "slurm_cluster", lambda: "slurm")
    import submitit

    monkeypatch.setattr(submitit, "AutoExecutor", Executor)
    with pytest.raises(SystemExit):
        slurm.submit(
            [object()], LaunchOptions(launcher="slurm", slurm_gres="gpu:a100:1"), tmp_path, print
        )
    assert captured["slurm_gres"] == "gpu:a100:1" and captured["gpus_per_node"] is None
