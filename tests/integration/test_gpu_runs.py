"""Runs on one device are never taken for runs on another, an out-of-memory run fails
alone, and a record says where and how deterministically it ran. The GPU is faked at
the engine's one seam that names it (``runner.device_key``): the runs compute on the
CPU, filed as a GPU's would be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cl_bench import api
from cl_bench.cpu_flags import cpu_kind
from cl_bench.engine import environment, runner
from cl_bench.engine.out_of_memory import OutOfMemory, out_of_memory_named
from cl_bench.gate.compare import compare, environment_notes
from cl_bench.gate.suite import Measured
from cl_bench.store.records import Result

SYNTHETIC = {
    "scenario": "synthetic",
    "precision": "fp32",
    "progress": False,
    "echo": None,
    "backbone": "vit_tiny_patch16_224",
    "weights": "random",
    "image_size": 32,
}
H200 = environment.gpu_key("sm_90", "strict")


def files(out: Path) -> list[Path]:
    return sorted(out.glob("runs/*/*/*.json"))


def as_gpu(monkeypatch, key: dict | None = H200) -> None:
    monkeypatch.setattr(runner, "device_key", lambda device, deterministic: key)


def test_a_cpu_result_and_cpu_features_are_not_reused_by_a_gpu_request(tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path / "cache"))
    cpu = api.run(["simplecil"], out=out, **SYNTHETIC)[0]
    assert "device" not in cpu.config and cpu.device == "cpu"
    assert cpu.env["device_kind"] == "cpu" and cpu.env["determinism"]["mode"] == "strict"
    as_gpu(monkeypatch)
    gpu = api.run(["simplecil"], out=out, **SYNTHETIC)[0]
    assert len(files(out)) == 2 and gpu.path != cpu.path
    assert gpu.config["device"] == H200 and gpu.device == "cuda sm_90"
    record = json.loads(gpu.path.read_text())
    assert record["timing"]["features_from"] == "extracted"  # not the CPU's cached features
    as_gpu(monkeypatch, environment.gpu_key("sm_90", "fast"))
    fast = api.run(["simplecil"], out=out, **SYNTHETIC)[0]
    assert len(files(out)) == 3 and fast.device == "cuda sm_90 fast"
    as_gpu(monkeypatch, None)
    again = api.run(["simplecil"], out=out, **SYNTHETIC)[0]
    assert again.path == cpu.path and len(files(out)) == 3  # the CPU's result, skipped
    assert (
        json.loads(again.path.read_text())["created"] == json.loads(cpu.path.read_text())["created"]
    )


def test_an_out_of_memory_run_fails_alone_and_names_the_setting(tmp_path, monkeypatch):
    """One run of a 2 methods x 2 seeds grid runs out of memory: it gets a .failed
    record naming the batch sizes to lower, its memory is released, the others finish."""
    real = runner.train_and_evaluate
    released = []

    def train_and_evaluate(cls, card, data, backbone, device, progress, result, seed, *rest):
        if card.name == "tosca" and seed == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(cls, card, data, backbone, device, progress, result, seed, *rest)

    monkeypatch.setattr(runner, "train_and_evaluate", train_and_evaluate)
    monkeypatch.setattr(runner, "release_memory", released.append)
    out = tmp_path / "out"
    with pytest.raises(api.RunsFailed) as failed:
        api.run(
            ["simplecil", "tosca"], seeds=[1, 2], out=out, settings={"tosca.epochs": 1}, **SYNTHETIC
        )
    assert failed.value.failed == ["synthetic/tosca seed 1"]
    assert sorted((r.method, r.seed) for r in failed.value.results) == [
        ("simplecil", 1),
        ("simplecil", 2),
        ("tosca", 2),
    ]
    record = json.loads(next(out.glob("runs/synthetic/tosca/1-*.failed")).read_text())
    assert record["error"]["type"] == "OutOfMemory"
    message = record["error"]["message"]
    assert "tosca ran out of memory on cpu (CUDA out of memory" in message
    assert "tosca.batch_size (now 48)" in message and "tosca.eval_batch_size" in message
    assert released == [torch.device("cpu")]


def test_out_of_memory_clears_the_frames_that_held_the_runs_tensors():
    from cl_bench.cards.catalogue import load_method

    held = torch.ones(4)
    before = torch.cuda.OutOfMemoryError  # the alias CUDA code raises

    def train(big: torch.Tensor) -> None:
        raise before("CUDA out of memory.")

    with pytest.raises(OutOfMemory) as found:
        with out_of_memory_named(load_method("l2p"), torch.device("cpu")):
            train(held.clone())
    tb = found.value.__context__.__traceback__
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    assert frames and all("big" not in f.f_locals for f in frames)
    assert "l2p.batch_size (now 16)" in str(found.value)


def test_a_kernel_strict_determinism_forbids_is_named_with_the_fix():
    from cl_bench.cards.catalogue import load_method

    with (
        pytest.raises(Exception) as found,
        out_of_memory_named(load_method("ewc"), torch.device("cuda")),
    ):
        raise RuntimeError(
            "index_add_cuda_ does not have a deterministic implementation, "
            "but you set 'torch.use_deterministic_algorithms(True)'."
        )
    assert type(found.value).__name__ == "UserError"
    assert "--deterministic fast" in str(found.value)
    with (
        pytest.raises(ValueError, match="a bug"),
        out_of_memory_named(load_method("ewc"), torch.device("cpu")),
    ):
        raise ValueError("a bug stays a bug")


def test_each_run_starts_its_own_peak(tmp_path, monkeypatch):
    resets = []
    monkeypatch.setattr(runner, "reset_peak_memory", resets.append)
    api.run(["simplecil", "tosca"], out=tmp_path / "out", settings={"tosca.epochs": 1}, **SYNTHETIC)
    assert resets == [torch.device("cpu")] * 2


def test_reset_peak_memory_resets_cuda_only(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", calls.append)
    environment.reset_peak_memory(torch.device("cpu"))
    environment.reset_peak_memory(torch.device("cuda:1"))
    assert calls == [torch.device("cuda:1")]


def test_the_report_labels_runs_by_device_when_a_scenario_has_several(tmp_path, monkeypatch):
    out = tmp_path / "out"
    api.run(["simplecil"], out=out, **SYNTHETIC)
    as_gpu(monkeypatch)
    api.run(["simplecil"], out=out, **SYNTHETIC)
    runs = api.load_results(out)
    assert sorted(runs["label"]) == ["simplecil (cpu)", "simplecil (cuda sm_90)"]
    assert sorted(runs["device"]) == ["cpu", "cuda sm_90"]


def test_the_gate_says_when_gpu_numbers_meet_a_cpu_baseline():
    baseline = {
        "provenance": {"cpu_capability": "AVX2", "precision": {"e/simplecil": "fp32"}},
        "metrics": {
            "e/simplecil": {m: {"value": 80.0, "tolerance": 1.0} for m in ("avg_acc", "last_acc")}
        },
    }
    measured = Measured(
        values={"e/simplecil": {"avg_acc": 80.5, "last_acc": 79.5}},
        precision={"e/simplecil": "bf16"},
        device={"e/simplecil": "cuda sm_90"},
    )
    rows = compare(baseline, measured, None, cpu="AVX2")
    assert {r.ran_in for r in rows} == {"AVX2/fp32 -> cuda sm_90/bf16"}
    assert all(r.status == "ok" for r in rows)
    notes = environment_notes(rows, baseline, measured)
    assert "measured on a GPU and compared with a CPU baseline" in notes[0]
    same = Measured(
        values=measured.values, precision={"e/simplecil": "fp32"}, device={"e/simplecil": "cpu"}
    )
    assert not any(
        "GPU" in n
        for n in environment_notes(compare(baseline, same, None, cpu="AVX2"), baseline, same)
    )


def test_a_result_records_its_device(tmp_path):
    result = api.run(["simplecil"], out=tmp_path / "out", **SYNTHETIC)[0]
    assert isinstance(result, Result)
    record = json.loads(result.path.read_text())
    assert record["env"]["device_kind"] == "cpu"
    assert record["env"]["cpu_kind"] == cpu_kind()  # amx and avx512_bf16 round bf16 apart
    assert record["env"]["determinism"] == {"mode": "strict", "asked": "strict", "device": "cpu"}
    assert set(record["memory"]) == {
        "peak_rss_bytes",
        "peak_rss_scope",
        "cuda_max_allocated_bytes",
        "cuda_max_reserved_bytes",
    }
