"""Frozen CNN features through OpenVINO (cl_bench/backbones/compiled.py): equal to torch
eager fp32 up to round-off, bit-identical across calls and batch sizes, recompiled when
the weights change, chosen only where it applies, and kept apart from torch eager's
results and cached features."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cl_bench.backbones.base import TORCH_RUNTIME
from cl_bench.backbones.compiled import (
    SWITCH,
    CompiledPass,
    native_bf16,
    openvino_version,
    runtime_for,
)
from cl_bench.backbones.efficientnet import efficientnet_lite0
from cl_bench.cards.catalogue import load_method
from cl_bench.cpu_flags import cpu_kind
from cl_bench.engine.features import FeatureStore
from cl_bench.engine.runner import resolved_config
from cl_bench.errors import UserError
from cl_bench.scenarios.loaders import LOADERS

pytestmark = pytest.mark.skipif(openvino_version() is None, reason="openvino not installed")
ROOT = Path(__file__).resolve().parents[2]
SIZE = 64
OV = f"openvino-{openvino_version()}"


@pytest.fixture
def auto(monkeypatch):
    monkeypatch.setenv(SWITCH, "auto")


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    """tests/integration/compiled_probe.py's measurements, in a process of its own (see
    there), with a home folder of its own (what is written there is listed)."""
    home, scratch = tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("probe")
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "integration" / "compiled_probe.py"), str(scratch)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return {**json.loads(done.stdout.splitlines()[-1]), "home": sorted(os.listdir(home))}


def test_fp32_features_equal_eager_up_to_round_off(probe):
    found = probe["fp32"]
    assert probe["runtime"] == OV
    assert found["dtype"] == "torch.float32" and found["shape"] == [24, 1280]
    assert not found["identical_to_eager"]  # another runtime did compute them
    assert found["max_diff_share"] <= 1e-4
    assert found["fp16_changed_share"] < 0.03  # what the feature store keeps


def test_bit_identical_across_calls_and_batches(probe):
    """24 images are 3 slices over the streams in turn (one stream per thread, at most
    2); chunks of 7 are one slice each, and one image one slice of its own: the same
    features, bit for bit."""
    found = probe["fp32"]
    assert found["repeat_equal"] and found["chunks_equal"] and found["single_equal"]
    assert found["compiled_once"]
    assert found["streams"] == min(found["threads"], 2)


def test_recompiled_when_weights_or_threads_change(probe):
    found = probe["recompiled"]
    assert found["new_compilation"] and found["moved"] > 1e-2
    assert found["max_diff_share"] <= 1e-4  # the new weights' features
    assert found["threads_after_set_to_1"] == found["streams_after_set_to_1"] == 1


def test_conversion_sends_no_telemetry_and_writes_nothing_home(probe):
    """OpenVINO's converter reports usage over the network (and keeps an id in
    ~/intel) unless opted out; ours runs with the converter's no-op stand-in."""
    assert probe["telemetry"] == ["openvino.tools.ovc.telemetry_stub"] * 2
    assert "intel" not in probe["home"]  # (Avalanche and matplotlib keep folders there)


@pytest.mark.skipif(not native_bf16(), reason="the CPU has no bf16 units")
def test_bf16_hint_computes_in_bf16(probe):
    """OpenVINO's bf16 replaces torch's bf16 autocast: as far from fp32 as that is (by
    the smallest cosine similarity of a feature to its fp32 value), and not fp32."""
    found = probe["bf16"]
    assert found["max_diff_share"] > 1e-2
    assert found["similarity"] >= found["autocast_similarity"] - 0.005
    assert found["similarity"] > 0.98 and found["repeat_equal"]


def test_runtime_applies_to_cnns_on_the_cpu(auto, monkeypatch):
    assert runtime_for("cnn", "cpu", "fp32") == OV
    assert runtime_for("vit", "cpu", "fp32") == TORCH_RUNTIME
    assert runtime_for("cnn", "cuda", "fp32") == TORCH_RUNTIME
    assert runtime_for("cnn", "cpu", "bf16") == (OV if native_bf16() else TORCH_RUNTIME)
    monkeypatch.setattr("cl_bench.backbones.compiled.native_bf16", lambda: False)
    assert runtime_for("cnn", "cpu", "bf16") == TORCH_RUNTIME  # torch emulates bf16
    monkeypatch.setenv(SWITCH, "torch")
    assert runtime_for("cnn", "cpu", "fp32") == TORCH_RUNTIME


def test_switch_values_are_checked(monkeypatch):
    monkeypatch.setenv(SWITCH, "tensorrt")
    with pytest.raises(UserError, match="CL_BENCH_FROZEN_RUNTIME='tensorrt' is not a runtime"):
        runtime_for("cnn", "cpu", "fp32")
    monkeypatch.setattr("cl_bench.backbones.compiled.openvino_version", lambda: None)
    monkeypatch.setenv(SWITCH, "auto")
    assert runtime_for("cnn", "cpu", "fp32") == TORCH_RUNTIME
    monkeypatch.setenv(SWITCH, "openvino")
    with pytest.raises(UserError, match="not installed in this environment"):
        runtime_for("cnn", "cpu", "fp32")


def test_runtime_in_cache_key_and_config_only_where_it_runs(auto):
    backbone, data = efficientnet_lite0("pretrained", SIZE), LOADERS["synthetic"](None)
    backbone.runtime = OV
    store = FeatureStore(torch.device("cpu"), progress=False, use_disk=False)
    compiled_key = store.key(backbone, data, "train")
    backbone.runtime = TORCH_RUNTIME
    eager_key = store.key(backbone, data, "train")
    cpu = ("cpu", cpu_kind())  # the CPU's kind closes every CPU key (tests/unit/test_cpu_kind.py)
    assert eager_key[-1] == cpu and compiled_key == (*eager_key[:-1], ("runtime", OV), cpu)
    scenario = load_method("simplecil")  # any card: only its name and params are read
    for method, recorded in (("simplecil", OV), ("ewc", None)):  # ewc trains the images
        config = resolved_config(load_method(method), scenario, backbone, "fp32", data)
        assert config["backbone"].get("runtime") == recorded


def test_run_records_the_runtime_and_keeps_eager_results_apart(probe):
    """The same SimpleCIL and APER w/ BN runs through both runtimes: the same accuracies
    here (fp32 features equal up to round-off), a result file per method and runtime,
    and cache entries per runtime for the frozen features but one set for the adapted
    CNN's (extracted in torch either way: the second run reads them)."""
    cli = probe["cli"]
    assert {r: cli["printed"][r]["exit_code"] for r in ("torch", "auto")} == {
        "torch": 0,
        "auto": 0,
    }, cli["printed"]
    assert cli["results"] == 4
    assert set(cli["acc_matrix"]) == {
        f"{m} {r}" for m in ("simplecil", "aper") for r in ("None", OV)
    }
    for method in ("simplecil", "aper"):
        assert cli["acc_matrix"][f"{method} None"] == cli["acc_matrix"][f"{method} {OV}"]
    assert f"cpu/fp32, frozen features through {OV}" in cli["printed"]["auto"]["stdout"]
    # frozen: 2 splits x 2 runtimes; adapted (+bn): 2 splits, written once, read again
    assert cli["cache_entries"] == 2 * 2 + 2
    assert "frozen features through" not in cli["printed"]["torch"]["stdout"]


def test_runtime_failures_become_a_user_error_with_the_way_around():
    """OpenVINO's failures (its infer requests raise RuntimeError, its converter its own
    exception types) name the backbone, the precision, the cause and the fixes; any other
    exception passes unchanged."""
    from cl_bench.backbones.compiled import runtime_errors

    conversion_failure = type(
        "OpConversionFailure", (Exception,), {"__module__": "openvino._pyopenvino"}
    )
    for error in (
        RuntimeError(
            "Exception from src/node.cpp:823:\n[CPU] Convolution node "
            "with name 'Multiply_1' object is not initialized\n"
        ),
        conversion_failure("Model wasn't fully converted."),
    ):
        with pytest.raises(UserError) as caught, runtime_errors("efficientnet_lite0", "bf16"):
            raise error
        message = str(caught.value)
        assert "efficientnet_lite0" in message and "in bf16" in message
        assert f"{SWITCH}=torch" in message and "--precision fp32" in message
        assert str(error).strip().splitlines()[-1].strip() in message
    with pytest.raises(ValueError), runtime_errors("efficientnet_lite0", "fp32"):
        raise ValueError("not OpenVINO's")


@pytest.mark.parametrize("layout", [(0, 2, 8), (2, 0, 8), (2, 2, 0), (2, 2, -1)])
def test_a_pass_layout_below_one_is_refused_before_compiling(layout):
    """threads, streams or slice size below 1 (no request to run, or an empty slice) is
    refused before anything is traced or compiled."""
    with pytest.raises(ValueError, match="at least 1"):
        CompiledPass(None, *layout)
