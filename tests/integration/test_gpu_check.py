"""bench/gpu_check on a machine without a GPU: the refusal, and the dry run that runs
every part of the script on the CPU at toy sizes (its figures are not a GPU's; what is
checked is that each part runs and reports what the table and the JSON promise)."""

from __future__ import annotations

import json

import pytest
import torch

from bench.gpu_check import __main__ as gpu_check
from bench.gpu_check.report import table
from cl_bench.engine.environment import resolve_precision


def test_it_refuses_without_a_gpu_in_one_paragraph(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 2
    said = capsys.readouterr().err
    assert said.startswith("error: bench.gpu_check measures a CUDA GPU")
    assert "--cpu-dry-run" in said and said.count("\n") == 1


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check") / "check.json"
    assert gpu_check.main(["--cpu-dry-run", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_the_dry_run_runs_every_part(dry_run):
    assert dry_run["errors"] == {} and dry_run["dry_run"] is True
    assert set(dry_run["seconds"]) == {
        "machine",
        "extraction",
        "methods",
        "agreement",
        "determinism",
    }
    assert dry_run["machine"]["device"] == "cpu" and dry_run["machine"]["gpu"] is None
    for precision in ("bf16", "fp32"):
        found = dry_run["extraction"][precision]
        assert found["images_per_s"] > 0 and found["matmul_peak_gflops"] > 0
        assert found["share_of_peak"] == pytest.approx(
            found["images_per_s"] * found["gflops_per_image"] / found["matmul_peak_gflops"]
        )


def test_each_method_trains_one_task_on_the_jpeg_tree(dry_run):
    tree = dry_run["methods"]["tree"]
    assert tree["classes"] == 2 and tree["images"] == 12
    for method in ("l2p", "coda-prompt", "ewc", "mos"):
        found = dry_run["methods"][method]
        # 2 classes x 5 training images at batch 4, one epoch: 3 steps (MOS: its one epoch)
        assert found["steps"] == 3, (method, found)
        # what --precision auto picks on this CPU: fp32 without bf16 units, bf16 with them
        assert found["batch_size"] == 4
        assert (
            found["precision"]
            == dry_run["machine"]["precision_auto"]
            == resolve_precision("auto", torch.device("cpu"))
        )
        assert 0 <= found["data_wait_share"] < 1 and found["step_s_median"] > 0


def test_agreement_and_determinism_on_one_device_are_exact(dry_run):
    """On the CPU both sides of each comparison are the same device: the differences
    must be exactly zero, which checks the comparisons themselves."""
    features = dry_run["agreement"]["features"]
    assert features["largest_abs_difference"] == 0.0 and features["within"] is True
    for mode in ("strict", "fast"):
        assert dry_run["determinism"][mode]["bitwise_equal"] is True
    assert dry_run["determinism"]["strict"]["set"]["mode"] == "strict"


def test_the_table_names_every_figure(dry_run):
    lines = "\n".join(table(dry_run))
    auto = dry_run["machine"]["precision_auto"]  # bf16 on a CPU with bf16 units
    for needle in (
        "extraction   bf16 images/s",
        "one task     coda-prompt",
        "features fp32",
        f"strict twice ({auto})",
        "bitwise equal",
        "total",
    ):
        assert needle in lines, lines


def test_the_json_is_a_measurement_the_performance_page_reads(dry_run, tmp_path):
    """The check's JSON follows bench/measurements.py's schema (figure gpu-check, its
    date, device, precision and commit, the table's rows as headline), so a committed
    one is shown on the Performance page instead of stopping the documentation build."""
    from bench import measurements

    path = tmp_path / "gpu-check.json"
    path.write_text(json.dumps(dry_run))
    found = measurements.read(path, measurements.load_figures())
    assert found.figure == "gpu-check" and found.precision == "bf16, fp32"
    assert found.cpu.startswith("no GPU (a dry run on the CPU); host ")
    assert dict(found.headline)["machine: auto decides"] == (
        f"--device cpu, --precision {dry_run['machine']['precision_auto']}"
    )
    assert "dry run" in found.note


def test_a_dry_run_never_writes_into_the_committed_results(monkeypatch, tmp_path):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert gpu_check.default_out({"dry_run": True, "machine": {}}).parent == tmp_path
    assert gpu_check.default_out({"dry_run": False, "machine": {"gpu": "NVIDIA H100"}}) == (
        gpu_check.RESULTS / f"gpu-check-{__import__('time').strftime('%Y-%m-%d')}-nvidia-h100.json"
    )
