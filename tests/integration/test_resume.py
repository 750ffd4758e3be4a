"""Per-task checkpoints: a run SIGKILLed between two tasks resumes at the next task
and ends with exactly the numbers of an uninterrupted run (TOSCA and SimpleCIL on
features; EWC and L2P on a random-weight ViT-Tiny at 32 px); a damaged, foreign or
misfit checkpoint is discarded with a warning; `--slurm-requeue` submits jobs that
submitit requeues.

Runs are subprocesses of `python -m cl_bench run`, killed by a callback the test's
process adds to ``checkpoint.SAVED`` (tests/helpers/killed_run.py) right after a task's
checkpoint is written. With
several methods in one command and the hook set, the first invocation kills the first
method, the second resumes it, finishes it and kills the second method, and so on, and
a last invocation without the hook resumes the last: every method is killed and resumed
once. The uninterrupted runs on features and the run after a damaged checkpoint need no
fresh process and run in this one; the ViT-Tiny runs are the command that
tests/integration/conftest.py shares with APER's test.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from submitit.core.utils import DelayedSubmission
from submitit.helpers import Checkpointable

from cl_bench.engine import checkpoint
from cl_bench.engine.checkpoint import Damaged, RunCheckpoint, rng_state
from cl_bench.grid import worker
from cl_bench.store.results import checkpoint_path
from tests.helpers.cli import invoke
from tests.helpers.processes import (
    assert_same_numbers,
    ckpts,
    cl_bench,
    kill_and_resume,
    records,
)

REPO = Path(__file__).resolve().parents[2]
SYNTHETIC = ["--scenario", "synthetic", "--no-progress", "--precision", "fp32"]
FEATURES = [*SYNTHETIC, "--set", "tosca.epochs=3"]


@pytest.fixture(scope="module")
def reference_features(tmp_path_factory) -> dict[str, dict]:
    """TOSCA and SimpleCIL run through without interruption (in this process: on
    features their training and evaluation run on one thread, in any process)."""
    out = tmp_path_factory.mktemp("reference")
    run = invoke("run", "--out", str(out), *FEATURES, "--methods", "tosca,simplecil")
    assert run.exit_code == 0, run.output
    found = records(out)
    assert [found[m]["timing"]["resumed_from_task"] for m in ("tosca", "simplecil")] == [None, None]
    return found


def test_killed_features_runs_resume_with_identical_numbers(reference_features, tmp_path):
    final = kill_and_resume(
        tmp_path / "out", FEATURES, ["tosca", "simplecil"], kill_after=1, tasks=5
    )
    for method in ("tosca", "simplecil"):
        assert final[method]["timing"]["resumed_from_task"] == 2
        assert len(final[method]["acc_matrix"]) == 5
        assert_same_numbers(final[method], reference_features[method])


def test_killed_image_runs_resume_with_identical_numbers(vit_killed_and_resumed):
    """EWC (importances, anchors, clock, fine-tuned backbone copy) and L2P (prompts,
    keys, class masks) on a random-weight ViT-Tiny, killed after the first of 3 tasks
    (in the command tests/integration/conftest.py shares with APER and RanPAC)."""
    reference, final = vit_killed_and_resumed
    for method in ("ewc", "l2p"):
        record = reference[method]
        assert record["timing"]["resumed_from_task"] is None
        assert final[method]["timing"]["resumed_from_task"] == 1
        assert_same_numbers(final[method], record)


def test_damaged_checkpoint_is_discarded_and_the_run_starts_over(reference_features, tmp_path):
    out = tmp_path / "out"
    command = [*SYNTHETIC, "--methods", "simplecil"]
    assert cl_bench(out, *command, kill_after=1).returncode == -signal.SIGKILL
    [saved] = ckpts(out)
    blob = bytearray(saved.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    saved.write_bytes(bytes(blob))
    run = invoke("run", "--out", str(out), *command)  # the resume needs no fresh process
    assert run.exit_code == 0, run.output
    assert (
        f"warning: discarded the checkpoint {saved}: it is damaged: its SHA-256 does not "
        "match its contents; the run starts over."
    ) in run.stderr
    assert "resuming" not in run.stdout and ckpts(out) == []
    record = records(out)["simplecil"]
    assert record["timing"]["resumed_from_task"] is None
    assert_same_numbers(record, reference_features["simplecil"])


# ------------------------------------------------------------------ the file and its checks


KEY = {"method": "m", "seed": 1, "tasks": 3}


def test_checkpoint_file_round_trip_and_damage(tmp_path):
    path = tmp_path / "r.json.ckpt"
    payload = {"done": 2, "rows": [[50.0], [25.0, None]], "w": torch.arange(6.0).view(2, 3)}
    checkpoint.write(path, payload)
    back = checkpoint.read(path)
    assert back["done"] == 2 and back["rows"] == [[50.0], [25.0, None]]
    assert torch.equal(back["w"], payload["w"])
    whole = path.read_bytes()
    assert whole.endswith(b"\n") and b"cl-bench checkpoint sha256 " in whole[-100:]
    for damaged, why in (
        (whole[:-10], "its SHA-256 does not match its contents"),
        (whole[:20], "it is shorter than its trailer"),
        (whole[:100] + b"x" + whole[101:], "its SHA-256 does not match"),
    ):
        path.write_bytes(damaged)
        with pytest.raises(Damaged, match=why):
            checkpoint.read(path)


class FakeStrategy:
    """Draws its initialisation from torch's RNG, as a strategy does; records what
    it is restored from, or refuses it."""

    def __init__(self, refuse: bool = False) -> None:
        self.init = torch.rand(1)
        self.refuse, self.restored = refuse, None

    def restore_state(self, state: dict) -> None:
        if self.refuse:
            raise KeyError("luca.0.norm.weight")
        self.restored = state


def saved_checkpoint(result: Path, key: dict) -> torch.Tensor:
    """Write a checkpoint after one task; returns the RNG draw the resumed run makes next."""
    torch.manual_seed(7)
    rng = rng_state()
    after = torch.rand(1)
    checkpoint.write(
        checkpoint_path(result),
        {"key": key, "done": 1, "elapsed_s": 2.5, "rng": rng, "strategy": {"model": {}}},
    )
    return after


def test_good_checkpoint_restores_strategy_rng_and_progress(tmp_path, capsys):
    result = tmp_path / "r.json"
    run = RunCheckpoint(result, KEY)
    after = saved_checkpoint(result, run.key)
    strategy, other = run.start(lambda: (FakeStrategy(), "plugin"))
    assert strategy.restored == {"model": {}} and other == "plugin"
    assert (run.done, run.elapsed_s, run.resumed_from) == (1, 2.5, 1)
    assert torch.equal(torch.rand(1), after)
    assert capsys.readouterr().out == (
        f"  resuming m seed 1 at task 2/3 from {checkpoint_path(result)}\n"
    )


def test_misfit_checkpoint_is_discarded_and_the_strategy_built_fresh(tmp_path, capsys):
    result = tmp_path / "r.json"
    run = RunCheckpoint(result, KEY)
    saved_checkpoint(result, run.key)
    torch.manual_seed(0)
    fresh = torch.rand(1)
    torch.manual_seed(0)
    builds = []
    [strategy] = run.start(lambda: (builds.append(FakeStrategy(refuse=not builds)) or builds[-1],))
    assert len(builds) == 2 and strategy is builds[1] and strategy.restored is None
    assert torch.equal(strategy.init, fresh)  # as if no checkpoint had existed
    assert (run.done, run.elapsed_s, run.resumed_from) == (0, 0.0, None)
    assert not checkpoint_path(result).exists()
    assert capsys.readouterr().err == (
        f"warning: discarded the checkpoint {checkpoint_path(result)}: it does not fit this "
        "run's strategy (KeyError: 'luca.0.norm.weight'); the run starts over.\n"
    )


def test_other_runs_checkpoint_is_discarded(tmp_path, capsys):
    result = tmp_path / "r.json"
    saved_checkpoint(result, RunCheckpoint(result, {**KEY, "seed": 2}).key)
    run = RunCheckpoint(result, KEY)
    [strategy] = run.start(lambda: (FakeStrategy(),))
    assert strategy.restored is None and run.done == 0
    assert not checkpoint_path(result).exists()
    err = capsys.readouterr().err
    assert err.startswith(
        f"warning: discarded the checkpoint {checkpoint_path(result)}: it is "
        "another run's (key {'format': 1, 'result': 'r.json', 'method': 'm', "
        "'seed': 2, 'tasks': 3}"
    )


def test_no_result_path_means_no_checkpoint(tmp_path):
    run = RunCheckpoint(None, KEY)
    [strategy] = run.start(lambda: (FakeStrategy(),))
    run.save(strategy, 1, 1.0)
    assert run.path is None and run.done == 0 and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ --slurm-requeue


def fake_slurm(tmp_path: Path, monkeypatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/bin/sh\necho "Submitted batch job 4242"\n')
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit looks for it; never run
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")  # a controller that answers
    for tool in ("sbatch", "srun", "squeue"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize("requeue", [True, False])
def test_slurm_requeue_submits_checkpointable_jobs(tmp_path, monkeypatch, requeue):
    """What each job of the array calls: with --slurm-requeue a Checkpointable whose
    checkpoint() resubmits the same run (submitit requeues it on preemption or
    timeout); without it the plain worker function."""
    fake_slurm(tmp_path, monkeypatch)
    out = tmp_path / "out"
    result = invoke(
        "run",
        "--out",
        str(out),
        *SYNTHETIC,
        "--methods",
        "simplecil",
        "--launcher",
        "slurm",
        "--no-wait",
        *(["--slurm-requeue"] * requeue),
    )
    assert result.exit_code == 0, result.output
    [pickled] = out.glob("runs/_submitit/*/*_submitted.pkl")
    submitted = DelayedSubmission.load(pickled)
    [job] = submitted.args
    assert job.label == "synthetic/simplecil seed 1993"
    assert job.path.parent == out.resolve() / "runs" / "synthetic" / "simplecil"
    if not requeue:
        assert submitted.function is worker.work
        return
    assert isinstance(submitted.function, worker.Requeued)
    assert isinstance(submitted.function, Checkpointable)
    again = submitted.function.checkpoint(*submitted.args, **submitted.kwargs)
    assert isinstance(again, DelayedSubmission)
    assert again.function is submitted.function and again.args == (job,) and not again.kwargs


def test_slurm_requeue_needs_the_slurm_launcher(tmp_path):
    result = invoke("run", "--out", str(tmp_path / "out"), *SYNTHETIC, "--slurm-requeue")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: --slurm-requeue only apply with --launcher local (--jobs) or --launcher slurm"
    )
    assert not (tmp_path / "out").exists()
