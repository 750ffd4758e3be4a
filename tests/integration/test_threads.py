"""Intra-op threads per phase: backbone passes at the configured count, the small
per-step work of features-only methods (TOSCA, SimpleCIL) on one thread, and the
previous count restored afterwards."""

from __future__ import annotations

import json

import pytest
import torch
from avalanche.training.templates import SupervisedTemplate

from cl_bench.engine import features
from cl_bench.engine.environment import threads
from cl_bench.engine.runner import RunRequest, execute


@pytest.fixture(autouse=True)
def keep_thread_count():
    """The CLI's --threads sets the process-wide count; give the other tests theirs back."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_sets_and_restores_the_count():
    torch.set_num_threads(2)
    with threads(1) as n:
        assert (n, torch.get_num_threads()) == (1, 1)
    assert torch.get_num_threads() == 2
    with threads(None) as n:
        assert (n, torch.get_num_threads()) == (2, 2)
    assert torch.get_num_threads() == 2


def test_threads_restores_the_count_after_an_error():
    torch.set_num_threads(2)
    with pytest.raises(RuntimeError, match="boom"), threads(1):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == 2


def test_each_phase_runs_at_its_thread_count(tmp_path, monkeypatch):
    """TOSCA and SimpleCIL train and evaluate on one thread; feature extraction and
    an image method (Finetune) run at the configured count (the request's threads,
    as a suite's ``threads:`` or launch.py's share per worker sets it); the record says which."""
    seen: list[tuple[str, str, int]] = []
    extract = features.extract

    def observed_extract(*args, **kwargs):
        seen.append(("extract", "features", torch.get_num_threads()))
        return extract(*args, **kwargs)

    def observe(phase: str):
        original = getattr(SupervisedTemplate, phase)

        def wrapper(self, **kwargs):
            seen.append((type(self).__name__, phase, torch.get_num_threads()))
            return original(self, **kwargs)

        return wrapper

    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path / "cache"))  # features are extracted here
    monkeypatch.setattr(features, "extract", observed_extract)
    monkeypatch.setattr(SupervisedTemplate, "_before_training_exp", observe("_before_training_exp"))
    monkeypatch.setattr(SupervisedTemplate, "_before_eval_exp", observe("_before_eval_exp"))
    torch.set_num_threads(1)
    execute(
        RunRequest(
            methods=["tosca", "simplecil", "finetune"],
            scenario="synthetic",
            backbone="vit_tiny_patch16_224",
            weights="random",
            image_size=32,
            threads=2,
            progress=False,
            out=tmp_path,
            sets=[
                "scenario.init_cls=5",
                "scenario.increment=5",
                "tosca.epochs=1",
                "finetune.epochs=1",
            ],
        ),
        echo=lambda line: None,
    )
    assert sorted(set(seen)) == [
        ("Finetune", "_before_eval_exp", 2),
        ("Finetune", "_before_training_exp", 2),
        ("SimpleCIL", "_before_eval_exp", 1),
        ("SimpleCIL", "_before_training_exp", 1),
        ("Tosca", "_before_eval_exp", 1),
        ("Tosca", "_before_training_exp", 1),
        ("extract", "features", 2),
    ]
    assert [s for s in seen if s[0] == "Tosca"] == [
        ("Tosca", "_before_training_exp", 1),
        ("Tosca", "_before_eval_exp", 1),
    ] * 2
    assert torch.get_num_threads() == 2  # the configured count again after the runs
    recorded = {
        r["method"]: r["timing"]["threads"]
        for r in (json.loads(p.read_text()) for p in tmp_path.glob("runs/*/*/*.json"))
    }
    assert recorded == {
        "tosca": {"features": 2, "train_eval": 1},
        "simplecil": {"features": 2, "train_eval": 1},
        "finetune": {"features": 2, "train_eval": 2},
    }
