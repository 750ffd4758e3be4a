"""Shared fixtures: one small end-to-end run reused by several tests; `probe`, a
test-only method for grids in worker processes and on the SLURM cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cl_bench.cards import config
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


PROBE_MODULE = '''
import os
import time
from pathlib import Path

import torch

from cl_bench.strategies.simplecil import SimpleCIL


class Probe(SimpleCIL):
    """SimpleCIL that logs its seed, then fails (PROBE_FAIL) or waits for PROBE_GO
    (PROBE_HOLD: seeds or "all"); with PROBE_HOLD_TASK=k (or k@seed,seed) it also
    waits for PROBE_GO before training task k (tasks count from 0), after the earlier
    tasks' checkpoints, and notes the wait in PROBE_LOG.hold."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        seed = self.probe_seed = str(torch.initial_seed())  # run_one seeds torch with it
        with open(os.environ["PROBE_LOG"], "a") as f:
            f.write(f"{seed} {os.getpid()}\\n")
        if seed in os.environ.get("PROBE_FAIL", "").split(","):
            raise RuntimeError(f"probe failure for seed {seed}")
        hold = os.environ.get("PROBE_HOLD", "").split(",")
        if "all" in hold or seed in hold:
            while not Path(os.environ["PROBE_GO"]).exists():
                time.sleep(0.05)

    def train(self, experiences, *args, **kwargs):
        task, _, seeds = os.environ.get("PROBE_HOLD_TASK", "").partition("@")
        go = Path(os.environ["PROBE_GO"])
        mine = not seeds or self.probe_seed in seeds.split(",")
        if task and mine and experiences.current_experience == int(task) and not go.exists():
            with open(os.environ["PROBE_LOG"] + ".hold", "a") as f:
                f.write(f"{self.probe_seed} {os.getpid()}\\n")
            while not go.exists():
                time.sleep(0.05)
        return super().train(experiences, *args, **kwargs)
'''

PROBE_CARD = """name: probe
title: Probe
strategy: cl_probe:Probe
inputs: features
backbones: any
defaults:
  batch_size: 128
  eval_batch_size: 128
"""

DRIVER = """import sys
from pathlib import Path

import cl_bench.cards.config

if __name__ == "__main__":
    cl_bench.cards.config.METHODS_DIR = Path(sys.argv[1])
    from cl_bench.commands.cli import app
    app(sys.argv[2:], prog_name="cl-bench")
"""

GRID = ["--scenario", "synthetic", "--methods", "probe", "--no-progress"]


@pytest.fixture
def probe(tmp_path, monkeypatch) -> Path:
    """The `probe` method, known to this process and importable by every worker."""
    home = tmp_path / "probe"
    (home / "methods").mkdir(parents=True)
    (home / "cl_probe.py").write_text(PROBE_MODULE)
    (home / "methods" / "probe.yaml").write_text(PROBE_CARD)
    (home / "driver.py").write_text(DRIVER)
    monkeypatch.setattr(config, "METHODS_DIR", home / "methods")
    monkeypatch.syspath_prepend(str(home))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(home), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("PROBE_LOG", str(home / "probe.log"))
    monkeypatch.setenv("PROBE_GO", str(home / "go"))
    for name in ("PROBE_FAIL", "PROBE_HOLD", "PROBE_HOLD_TASK"):
        monkeypatch.delenv(name, raising=False)
    return home


def starts(home: Path) -> Counter:
    """How many times each seed's run started (one log line per start)."""
    log = home / "probe.log"
    return Counter(line.split()[0] for line in log.read_text().splitlines()) if (
        log.exists()) else Counter()


@pytest.fixture
def start_grid(probe):
    """Start `cl-bench run` as its own process group (so the whole grid can be killed),
    output to ``log``; whatever is still running at the end of the test is killed."""
    started: list[tuple[subprocess.Popen, object]] = []

    def start(out: Path, *args: str, log: Path, **env: str) -> subprocess.Popen:
        cmd = [sys.executable, str(probe / "driver.py"), str(probe / "methods"), "run",
               "--out", str(out), *GRID, *args]
        sink = log.open("w")
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT,
                                env={**os.environ, **env}, start_new_session=True)
        started.append((proc, sink))
        return proc

    yield start
    for proc, sink in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        sink.close()


def status_of(out: Path) -> str:
    result = invoke("status", "--out", str(out))
    assert result.exit_code == 0, result.output
    return result.stdout


SLURM_LOCAL = Path(__file__).resolve().parents[1] / "scripts" / "slurm-local.sh"


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A one-node SLURM cluster (scripts/slurm-local.sh), started once for the
    `slurm`-marked tests and stopped after them; skipped unless asked for."""
    if os.environ.get("CL_BENCH_SLURM_TESTS") != "1":
        pytest.skip("the slurm tests start a one-node SLURM cluster: run them with "
                    "CL_BENCH_SLURM_TESTS=1 as root on Debian (.ci/run does)")
    if os.geteuid() != 0:
        pytest.skip("scripts/slurm-local.sh needs root to install and run the daemons")
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "CL_BENCH_SLURM_DIR": str(state)}
    started = subprocess.run([str(SLURM_LOCAL), "start"], env=env, capture_output=True,
                             text=True)
    if started.returncode != 0:
        subprocess.run([str(SLURM_LOCAL), "stop"], env=env)
        pytest.fail(f"scripts/slurm-local.sh start failed:\n{started.stderr[-3000:]}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(state / "slurm.conf"))
        mp.setenv("CL_BENCH_SLURM_POLL_S", "1")
        yield state
    stopped = subprocess.run([str(SLURM_LOCAL), "stop"], env=env, capture_output=True,
                             text=True)
    assert stopped.returncode == 0, stopped.stderr
