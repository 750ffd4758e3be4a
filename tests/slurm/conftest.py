"""Fixtures of the slurm layer: a one-node SLURM cluster, started once."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers.paths import SLURM_LOCAL


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A one-node SLURM cluster (scripts/slurm-local.sh), started once for the
    `slurm`-marked tests and stopped after them; skipped unless asked for."""
    if os.environ.get("CL_BENCH_SLURM_TESTS") != "1":
        pytest.skip(
            "the slurm tests start a one-node SLURM cluster: run them with "
            "CL_BENCH_SLURM_TESTS=1 as root on Debian (.ci/run does)"
        )
    if os.geteuid() != 0:
        pytest.skip("scripts/slurm-local.sh needs root to install and run the daemons")
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "CL_BENCH_SLURM_DIR": str(state)}
    started = subprocess.run([str(SLURM_LOCAL), "start"], env=env, capture_output=True, text=True)
    if started.returncode != 0:
        subprocess.run([str(SLURM_LOCAL), "stop"], env=env)
        pytest.fail(f"scripts/slurm-local.sh start failed:\n{started.stderr[-3000:]}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(state / "slurm.conf"))
        mp.setenv("CL_BENCH_SLURM_POLL_S", "1")
        yield state
    stopped = subprocess.run([str(SLURM_LOCAL), "stop"], env=env, capture_output=True, text=True)
    assert stopped.returncode == 0, stopped.stderr
