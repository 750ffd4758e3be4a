"""Fixtures of the integration layer: one small end-to-end run reused by several tests,
and one command of image methods on a random ViT-Tiny killed after a task and resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import FAST, invoke
from tests.helpers.features import e2e_cache
from tests.helpers.processes import VIT_STREAM, cl_bench, kill_and_resume, records

# APER and RanPAC (test_aper.py), EWC and L2P (test_resume.py): one command for the four,
# in the order of their names (the order kill_and_resume finds their records in)
VIT_KILLED_METHODS = ["aper", "ewc", "l2p", "ranpac"]
VIT_KILLED = [
    *VIT_STREAM,
    "--set",
    "ewc.epochs=1",
    "--set",
    "l2p.epochs=1",
    "--set",
    "aper.epochs=1",
    "--set",
    "ranpac.M=32",
    "--set",
    "ranpac.epochs=1",
]


@pytest.fixture(scope="session")
def e2e_run(tmp_path_factory, private_feature_cache) -> tuple[Path, object, dict]:
    """TOSCA + SimpleCIL on `synthetic` with the offline EfficientNet-Lite0."""
    out = tmp_path_factory.mktemp("e2e")
    with pytest.MonkeyPatch.context() as mp:  # its own cache: it checks that it extracts
        mp.setenv("CL_BENCH_CACHE", str(e2e_cache(tmp_path_factory)))
        result = invoke("run", "--out", str(out), *FAST)
    records = {
        json.loads(p.read_text())["method"]: json.loads(p.read_text())
        for p in sorted(out.glob("runs/*/*/*.json"))
    }
    return out, result, records


@pytest.fixture(scope="session")
def vit_killed_and_resumed(tmp_path_factory) -> tuple[dict, dict]:
    """(uninterrupted records, killed-and-resumed records) per method of
    ``VIT_KILLED_METHODS`` on a random-weight ViT-Tiny at 32 px (3 tasks): each method
    killed once after its first task and resumed (tests/helpers/processes.py); one
    command for the four, so each process start serves them all."""
    tmp = tmp_path_factory.mktemp("vit_killed")
    methods = ["--methods", ",".join(VIT_KILLED_METHODS)]
    reference = cl_bench(tmp / "reference", *VIT_KILLED, *methods)
    assert reference.returncode == 0, reference.stdout + reference.stderr
    final = kill_and_resume(tmp / "out", VIT_KILLED, VIT_KILLED_METHODS, kill_after=0, tasks=3)
    return records(tmp / "reference"), final
