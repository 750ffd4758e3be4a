"""A result's ``config.device`` is checked on read like the rest of the record: a text,
a list, or an object of other keys or types makes the record invalid for `status`
(named with why) and `report` (skipped with a warning), not a finished CPU row or a
row labelled with a Python repr; a GPU block as the engine writes it is read and
labelled."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from cl_bench.engine import gpu
from cl_bench.engine.environment import DETERMINISM, gpu_key
from cl_bench.store import device_block, results
from cl_bench.store.record_check import problems
from cl_bench.store.records import Result
from tests.helpers.cli import invoke

RUN = [
    "--scenario",
    "synthetic",
    "--no-progress",
    "--precision",
    "fp32",
    "--methods",
    "simplecil",
    "--image-size",
    "32",
]
GOOD = {"kind": "cuda", "arch": "sm_90", "deterministic": "fast"}
# device -> the problem named
BAD = {
    "text": (
        "cuda",
        "config.device is 'cuda', not an object of kind, arch, deterministic (absent on the CPU)",
    ),
    "list": (
        ["cuda", "sm_90", "strict"],
        "config.device is ['cuda', 'sm_90', 'strict'], not an object of kind, arch, deterministic",
    ),
    "null": (None, "config.device is None, not an object"),
    "keys": (
        {"kind": "cuda", "arch": "sm_90"},
        "config.device has the keys arch, kind, not kind, arch, deterministic",
    ),
    "kind": ({**GOOD, "kind": "cpu"}, "config.device.kind is 'cpu', not one of cuda"),
    "arch number": (
        {**GOOD, "arch": 90},
        "config.device.arch is 90, not a GPU architecture such as sm_90",
    ),
    "arch text": (
        {**GOOD, "arch": "Hopper"},
        "config.device.arch is 'Hopper', not a GPU architecture such as sm_90",
    ),
    "mode": (
        {**GOOD, "deterministic": True},
        "config.device.deterministic is True, not one of strict, fast",
    ),
}


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[Path, Path]:
    """SimpleCIL on `synthetic`, seed 1993, on the CPU: its results folder and file."""
    out = tmp_path_factory.mktemp("clean")
    result = invoke("run", "--out", str(out), *RUN)
    assert result.exit_code == 0, result.output
    (path,) = out.glob("runs/synthetic/simplecil/*.json")
    return out, path


def with_device(clean: tuple[Path, Path], tmp_path: Path, device) -> tuple[Path, Path]:
    """A copy of the clean folder with, beside the CPU record, the same record given
    ``device``, under the name its config hashes to."""
    out, path = clean
    copy = tmp_path / "res"
    shutil.copytree(out, copy)
    record = results.load(path)
    record["config"]["device"] = device
    moved = (
        copy
        / path.parent.relative_to(out)
        / (f"{record['seed']}-{results.config_hash(record['config'])}.json")
    )
    moved.write_text(json.dumps(record))
    return copy, moved


@pytest.mark.parametrize("case", list(BAD))
def test_a_malformed_device_is_named_by_status(case, clean, tmp_path):
    device, problem = BAD[case]
    out, path = with_device(clean, tmp_path, device)
    assert [p for p in problems(results.load(path), path) if p.startswith(problem)], problem
    result = invoke("status", "--results", str(out))
    assert result.exit_code == 0, result.output
    (row,) = [line for line in result.stdout.splitlines() if path.stem[5:] in line]
    assert row.split()[4] == "invalid" and problem in row
    assert "Traceback" not in result.output


@pytest.mark.parametrize("case", ["text", "list", "arch number"])
def test_report_skips_a_malformed_device(case, clean, tmp_path):
    device, problem = BAD[case]
    out, path = with_device(clean, tmp_path, device)
    result = invoke(
        "report",
        "--results",
        str(out),
        "--out",
        str(tmp_path / "r"),
        "--format",
        "csv",
        "--images",
        "none",
    )
    assert result.exit_code == 0, result.output
    (warning,) = result.stderr.splitlines()
    assert warning.startswith(f"warning: skipped {path}: ") and problem in warning
    assert set(pd.read_csv(tmp_path / "r" / "runs.csv")["device"]) == {"cpu"}


def test_a_gpu_block_as_the_engine_writes_it_is_read_and_labelled(clean, tmp_path):
    out, path = with_device(clean, tmp_path, GOOD)
    assert problems(results.load(path), path) == []
    assert Result.from_file(path).device == "cuda sm_90 fast"
    result = invoke("status", "--results", str(out))
    rows = [line.split() for line in result.stdout.splitlines()[1:-1]]
    assert [row[4] for row in rows] == ["done", "done"], result.output


def test_the_check_knows_what_the_engine_writes():
    """The block's keys, kinds and modes are the engine's, and its architectures pass."""
    assert device_block.MODES == DETERMINISM
    for mode in DETERMINISM:
        key = gpu_key(gpu.arch_name((9, 0)), mode)
        assert tuple(key) == device_block.KEYS and key["kind"] in device_block.KINDS
    for capability in ((7, 0), (8, 6), (9, 0), (10, 0), (12, 1)):
        assert device_block.ARCH.fullmatch(gpu.arch_name(capability))
