"""Running as the other kind of machine (CL_BENCH_CPU_BF16), the package versions every
result records, and the lock that `make run` / `make test` install from."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import tomllib
import torch

from cl_bench import packages
from cl_bench.engine import environment
from cl_bench.errors import UserError

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]


def load_lock_script():
    spec = importlib.util.spec_from_file_location("lock", ROOT / "scripts" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("value", "detected", "auto"),
    [
        ("1", False, "bf16"),
        ("yes", False, "bf16"),
        ("0", True, "fp32"),
        ("false", True, "fp32"),
        ("", True, "bf16"),
        ("", False, "fp32"),
    ],
)
def test_switch_decides_what_auto_believes(monkeypatch, value, detected, auto):
    monkeypatch.setenv(environment.BF16_SWITCH, value)
    monkeypatch.setattr(environment, "detect_cpu_bf16", lambda: detected)
    assert environment.resolve_precision("auto", CPU) == auto
    assert environment.resolve_precision("fp32", CPU) == "fp32"


def test_switch_on_lets_bf16_run_emulated_and_off_refuses_it(monkeypatch):
    monkeypatch.setattr(environment, "detect_cpu_bf16", lambda: False)
    with pytest.raises(UserError, match="set CL_BENCH_CPU_BF16=1"):
        environment.resolve_precision("bf16", CPU)
    monkeypatch.setenv(environment.BF16_SWITCH, "1")
    assert environment.resolve_precision("bf16", CPU) == "bf16"
    monkeypatch.setattr(environment, "detect_cpu_bf16", lambda: True)
    monkeypatch.setenv(environment.BF16_SWITCH, "0")
    with pytest.raises(UserError, match="no bf16 matrix units"):
        environment.resolve_precision("bf16", CPU)


def test_dependency_versions_cover_the_tree():
    found = packages.dependency_versions()
    for name in ("torch", "timm", "avalanche", "numpy", "typer", "submitit"):
        assert found[name] == importlib.metadata.version(
            "avalanche-lib" if name == "avalanche" else name
        )
    assert "cl-bench" not in found and "pytest" not in found  # dev extra left out
    assert found["torch"] == torch.__version__.split("+")[0]


def test_package_differences_between_sides():
    old = {"torch": "2.14.1+cu130", "timm": "0.6.12", "avalanche": "0.6.0", "numpy": None}
    assert packages.recorded(old) == {"torch": "2.14.1", "timm": "0.6.12", "avalanche": "0.6.0"}
    now = {"torch": "2.14.1", "timm": "1.0.31", "avalanche": "0.6.0", "numpy": "2.4.6"}
    diff = packages.differing([packages.recorded(old), now])
    assert diff == {"timm": ["0.6.12", "1.0.31"]}  # numpy: only one side knows it
    assert packages.describe(diff) == "timm 0.6.12 / 1.0.31"
    assert packages.differing([now]) == {} and packages.differing([now, dict(now)]) == {}


def test_lock_pins_every_dependency_exactly():
    lock = load_lock_script()
    pins = lock.read_lock()
    assert pins["torch"] == "2.14.1" and pins["torchvision"] == "0.29.1"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    names = {lock.canonical(re.match(r"[A-Za-z0-9._-]+", req).group(0)) for req in wanted}
    assert not names - set(pins), f"not in the lock: {names - set(pins)}"
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", v) for v in pins.values())


def test_lock_verify_names_what_floats(monkeypatch, capsys):
    lock = load_lock_script()
    pins = lock.read_lock()
    monkeypatch.setattr(lock, "installed", lambda: {**pins, "pip": "23.2", "cl-bench": "0.1.0"})
    assert lock.verify() == 0
    monkeypatch.setattr(lock, "installed", lambda: {**pins, "timm": "0.6.12", "newpkg": "1.0"})
    assert lock.verify() == 1
    err = capsys.readouterr().err
    assert "in 2 package(s): newpkg 1.0 (lock: absent), timm 0.6.12 (lock: 1.0.31)" in err
    assert "python scripts/lock.py refresh" in err


def test_report_names_packages_that_differ_between_its_runs():
    import pandas as pd

    from cl_bench.reporting.report import package_note

    runs = pd.DataFrame(
        {
            "label": ["l2p", "l2p", "tosca"],
            "packages": [
                {"timm": "0.6.12", "torch": "2.14.1"},
                {"timm": "1.0.31", "torch": "2.14.1"},
                {"timm": "1.0.31", "torch": "2.14.1"},
            ],
        }
    )
    assert package_note(runs) == (
        "Package versions differ between these runs: timm 0.6.12 "
        "(l2p) / 1.0.31 (l2p, tosca). Numbers may move with them; "
        "compare runs made in one locked environment."
    )
    assert package_note(runs.iloc[1:]) is None


def test_lock_verify_without_a_lock_names_the_fix(monkeypatch, tmp_path, capsys):
    lock = load_lock_script()
    monkeypatch.setattr(lock, "LOCK", tmp_path / "requirements" / "lock.txt")
    monkeypatch.setattr(lock, "ROOT", tmp_path)
    assert lock.verify() == 1
    assert "is missing: restore it from git" in capsys.readouterr().err
