"""The device a run asks for, at the CLI on a machine without a GPU (faked,
tests/helpers/gpus.py): an unusable GPU is refused in one paragraph (the other rules
about GPUs: tests/unit/test_gpu_devices.py)."""

from __future__ import annotations

from tests.helpers.cli import invoke
from tests.helpers.gpus import fake_gpus


def test_the_cli_refuses_an_unusable_gpu_in_one_paragraph(monkeypatch, tmp_path):
    fake_gpus(monkeypatch, [], usable=False, present=1)
    result = invoke(
        "run",
        "--out",
        str(tmp_path / "out"),
        "--scenario",
        "synthetic",
        "--methods",
        "simplecil",
        "--no-progress",
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: This machine has 1 NVIDIA GPU(s)")
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()
