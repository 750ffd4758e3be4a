"""Each run records its own resident-set peak, not the process's largest so far: a grid
in one process where a run that holds 600 MiB precedes one that holds nothing."""

from __future__ import annotations

import json

import torch

from cl_bench.engine.environment import peak_memory, reset_peak_memory
from tests.helpers.cards import card_variant
from tests.helpers.cli import invoke
from tests.helpers.paths import REPO

MIB = 2**20
BIG = 600  # MiB

BIG_METHOD = f'''
import torch

from cl_bench.strategies.simplecil import SimpleCIL


class Big(SimpleCIL):
    """SimpleCIL that holds {BIG} MiB for a moment after each task."""

    def _after_training_exp(self, **kwargs):
        block = torch.ones({BIG} * 2**20 // 4)
        block.add_(1)
        del block
        super()._after_training_exp(**kwargs)
'''


def test_the_peak_is_reset_per_run():
    cpu = torch.device("cpu")
    reset_peak_memory(cpu)
    block = torch.ones(BIG * MIB // 4)
    block.add_(1)
    del block
    big = peak_memory(cpu)
    reset_peak_memory(cpu)
    small = peak_memory(cpu)
    assert big["peak_rss_scope"] == small["peak_rss_scope"] == "run"
    assert big["peak_rss_bytes"] - small["peak_rss_bytes"] > (BIG - 50) * MIB


def test_a_grid_records_each_runs_own_peak(tmp_path):
    cards = card_variant(tmp_path, REPO / "methods", "simplecil", "big", strategy="big_method:Big")
    (cards / "big_method.py").write_text(BIG_METHOD)
    out = tmp_path / "res"
    run = invoke(
        "run",
        "--cards",
        str(cards),
        "--out",
        str(out),
        "--methods",
        "big,simplecil",
        "--scenario",
        "synthetic",
        "--precision",
        "fp32",
        "--no-progress",
    )
    assert run.exit_code == 0, run.output
    assert run.output.index("big seed 1993") < run.output.index("simplecil seed 1993")
    peak = {
        json.loads(p.read_text())["method"]: json.loads(p.read_text())["memory"]
        for p in out.glob("runs/synthetic/*/*.json")
    }
    assert peak["big"]["peak_rss_scope"] == peak["simplecil"]["peak_rss_scope"] == "run"
    assert peak["big"]["peak_rss_bytes"] - peak["simplecil"]["peak_rss_bytes"] > (BIG - 50) * MIB
