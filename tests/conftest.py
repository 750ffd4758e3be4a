"""Shared fixtures: the private feature cache and torch-eager frozen features of every
test, one thread for tiny models, the `probe` method for grids in worker processes and
on the SLURM cluster, and the start of a grid as its own process group; and each test's
layer marker (unit, integration, parity, slurm) from the folder it is in. Helpers shared
between test files are in tests/helpers/; fixtures of one layer in its own conftest.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cl_bench.backbones.compiled import SWITCH
from cl_bench.cards import catalogue
from tests.helpers.probe import DRIVER, GRID, PROBE_CARD, PROBE_MODULE, interruptible

LAYERS = ("unit", "integration", "parity", "slurm")
HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(items) -> None:
    """Each test carries the marker of the layer folder it is in (tests/<layer>/...)."""
    for item in items:
        try:
            layer = item.path.resolve().relative_to(HERE).parts[0]
        except ValueError:
            continue
        if layer in LAYERS:
            item.add_marker(layer)


@pytest.fixture(autouse=True, scope="session")
def private_feature_cache(tmp_path_factory):
    """Tests never read or write the user's feature cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CL_BENCH_CACHE", str(tmp_path_factory.mktemp("feature_cache")))
    yield
    mp.undo()


@pytest.fixture(autouse=True, scope="session")
def eager_frozen_features():
    """Frozen CNN features in torch eager unless $CL_BENCH_FROZEN_RUNTIME says otherwise:
    the tests' exact accuracies were measured so, and torch's fp32 CPU kernels give them
    on AVX2 and AVX512 alike, while OpenVINO picks its kernels per instruction set and its
    last digits were measured on one kind of CPU only. The compiled runtime has tests of
    its own (test_compiled_features.py), which set the switch."""
    mp = pytest.MonkeyPatch()
    mp.setenv(SWITCH, os.environ.get(SWITCH) or "torch")
    yield
    mp.undo()


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: with two threads on two busy cores, synchronisation costs more
    than the arithmetic."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def probe(tmp_path, monkeypatch) -> Path:
    """The `probe` method (tests/helpers/probe.py), known to this process and importable
    by every worker."""
    home = tmp_path / "probe"
    (home / "methods").mkdir(parents=True)
    (home / "cl_probe.py").write_text(PROBE_MODULE)
    (home / "methods" / "probe.yaml").write_text(PROBE_CARD)
    (home / "driver.py").write_text(DRIVER)
    monkeypatch.setattr(catalogue, "METHODS_DIR", home / "methods")
    monkeypatch.syspath_prepend(str(home))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(home), os.environ.get("PYTHONPATH")) if p)
    )
    monkeypatch.setenv("PROBE_LOG", str(home / "probe.log"))
    monkeypatch.setenv("PROBE_GO", str(home / "go"))
    for name in ("PROBE_FAIL", "PROBE_OOM", "PROBE_HOLD", "PROBE_HOLD_TASK"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def start_grid(probe):
    """Start `cl-bench run` as its own process group (so the whole grid can be killed),
    output to ``log``; whatever is still running at the end of the test is killed."""
    started: list[tuple[subprocess.Popen, object]] = []

    def start(out: Path, *args: str, log: Path, **env: str) -> subprocess.Popen:
        cmd = [
            sys.executable,
            str(probe / "driver.py"),
            str(probe / "methods"),
            "run",
            "--out",
            str(out),
            *GRID,
            *args,
        ]
        sink = log.open("w")
        proc = subprocess.Popen(
            cmd,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
            preexec_fn=interruptible,
        )
        started.append((proc, sink))
        return proc

    yield start
    for proc, sink in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        sink.close()
