"""Shared fixtures: one small end-to-end run reused by several tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cl_bench.commands.cli import app

FAST = ["--scenario", "synthetic", "--no-progress", "--precision", "fp32", "--set",
        "tosca.epochs=3"]


def invoke(*args: str):
    """Run the CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    return CliRunner().invoke(app, list(args))


@pytest.fixture(autouse=True, scope="session")
def private_feature_cache(tmp_path_factory):
    """Tests never read or write the user's feature cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CL_BENCH_CACHE", str(tmp_path_factory.mktemp("feature_cache")))
    yield
    mp.undo()


def e2e_cache(tmp_path_factory) -> Path:
    """The feature cache of :func:`e2e_run`, for tests that read what it extracted."""
    path = tmp_path_factory.getbasetemp() / "e2e_cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def e2e_run(tmp_path_factory, private_feature_cache) -> tuple[Path, object, dict]:
    """TOSCA + SimpleCIL on `synthetic` with the offline EfficientNet-Lite0."""
    out = tmp_path_factory.mktemp("e2e")
    with pytest.MonkeyPatch.context() as mp:  # its own cache: it checks that it extracts
        mp.setenv("CL_BENCH_CACHE", str(e2e_cache(tmp_path_factory)))
        result = invoke("run", "--out", str(out), *FAST)
    records = {json.loads(p.read_text())["method"]: json.loads(p.read_text())
               for p in sorted(out.glob("runs/*/*/*.json"))}
    return out, result, records
