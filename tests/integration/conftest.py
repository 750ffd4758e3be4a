"""Fixtures of the integration layer: one small end-to-end run reused by several tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import FAST, invoke
from tests.helpers.features import e2e_cache


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
