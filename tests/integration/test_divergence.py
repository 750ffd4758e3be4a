"""Finite or failed: a diverged run leaves a ``.failed`` record and no result; settings
are finite however YAML spells them; a record with a non-finite number anywhere is
invalid and never written; a model degenerate by construction is refused up front."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cl_bench.engine.finite import FiniteWatch, all_finite, logits_valid
from cl_bench.errors import UserError
from cl_bench.store import results
from cl_bench.store.record_check import problems
from tests.helpers.cli import invoke, refused

VIT = ["--backbone", "vit_tiny_patch16_224", "--weights", "random", "--image-size", "32"]
RUN = ["--scenario", "synthetic", "--no-progress", "--precision", "fp32", *VIT]


def result_files(out: Path) -> list[Path]:
    return sorted(out.glob("runs/synthetic/*/*.json"))


def test_diverged_run_leaves_a_failed_record_and_no_result(tmp_path):
    """lr = 1e30 trains TOSCA to NaN: the run fails in task 1 with one paragraph naming
    the method, task, epoch and learning rate; no result file, a .failed record."""
    out = tmp_path / "out"
    result = invoke(
        "run",
        "--out",
        str(out),
        *RUN,
        "--methods",
        "tosca",
        "--set",
        "tosca.lr=1e30",
        "--set",
        "tosca.epochs=3",
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    line = next(x for x in result.stdout.splitlines() if "FAILED tosca seed 1993" in x)
    assert "tosca diverged: the training loss became nan in task 1, epoch " in line
    assert "a learning rate too large (tosca.lr = 1e+30 (the card's default: 0.025))" in line
    assert result_files(out) == []
    failed = list(out.glob("runs/synthetic/tosca/*.json.failed"))
    assert len(failed) == 1
    error = json.loads(failed[0].read_text())["error"]
    assert error["type"] == "UserError" and error["message"].startswith("tosca diverged")
    assert "1 run(s) failed (synthetic/tosca seed 1993)" in result.stderr


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (".inf", "inf"),
        ("-.inf", "-inf"),
        ("+.inf", "inf"),
        (".Inf", "inf"),
        (".INF", "inf"),
        (".nan", "nan"),
        (".NaN", "nan"),
        ("1.0e+999", "inf"),
    ],
)
def test_yaml_spellings_of_non_finite_floats_are_refused(tmp_path, text, shown):
    """YAML's own spellings of inf and nan are floats that pass every bound
    (``nan < 0`` is false); they are refused before anything is written."""
    out = tmp_path / "out"
    refused(
        invoke("run", "--out", str(out), *RUN, "--methods", "tosca", "--set", f"tosca.lr={text}"),
        f"tosca.lr = {shown} is not a finite number",
        out,
    )


@pytest.mark.parametrize(
    ("setting", "needle"),
    [
        ("tosca.momentum=.nan", "tosca.momentum = nan is not a finite number"),
        ("scenario.dataset_args={seed: .nan}", "synthetic.dataset_args.seed = nan is not a finite"),
        ("tosca.lr=1e999", "tosca.lr = inf is not a finite number"),
        ("tosca.lr=inf", "expected a float like the default (0.025), got 'inf'"),
    ],
)
def test_non_finite_anywhere_is_refused(tmp_path, setting, needle):
    out = tmp_path / "out"
    refused(
        invoke("run", "--out", str(out), *RUN, "--methods", "tosca", "--set", setting), needle, out
    )


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_zero_width_layer_is_refused_when_the_card_is_resolved(tmp_path, dry):
    """vit_tiny's feature width is 192: mlp_ratio 1,000,000 would build a 0-unit adapter."""
    out = tmp_path / "out"
    refused(
        invoke(
            "run",
            "--out",
            str(out),
            *RUN,
            "--methods",
            "tosca",
            "--set",
            "tosca.mlp_ratio=1000000",
            *dry,
        ),
        "tosca.mlp_ratio = 1000000 leaves LuCA's adapter with no unit: its width is the "
        "feature width over the ratio, 192 // 1000000 = 0 on vit_tiny_patch16_224. Set "
        "--set tosca.mlp_ratio to at most 192",
        out,
    )
    refused(
        invoke(
            "run",
            "--out",
            str(out),
            *RUN,
            "--methods",
            "tosca",
            "--set",
            "tosca.se_ratio=193",
            *dry,
        ),
        "LuCA's calibrator with no unit",
        out,
    )


def test_logits_may_mask_classes_but_not_be_nan():
    ok = torch.tensor([[1.0, float("-inf")], [0.0, 2.0]])
    assert logits_valid(ok)
    assert not logits_valid(torch.tensor([[1.0, float("nan")]]))
    assert not logits_valid(torch.tensor([[1.0, float("inf")]]))
    assert not logits_valid(torch.tensor([[float("-inf"), float("-inf")], [0.0, 1.0]]))
    assert all_finite([torch.ones(3), torch.zeros(2, 2)])
    assert not all_finite([torch.ones(3), torch.tensor([0.0, float("inf")])])


def fake_strategy(**fields) -> SimpleNamespace:
    clock = SimpleNamespace(train_exp_epochs=4, train_epoch_iterations=6)
    return SimpleNamespace(experience=SimpleNamespace(current_experience=2), clock=clock, **fields)


def epoch(watch: FiniteWatch, strategy: SimpleNamespace) -> None:
    """One training epoch of one iteration (the 7th of epoch 5, as the fake clock has it)
    as the watch sees it: the loss is read back at the epoch's end."""
    watch.before_training_epoch(strategy)
    watch.before_backward(strategy)
    watch.after_training_epoch(strategy)


def test_watch_names_method_task_epoch_and_cause():
    watch = FiniteWatch("ease", {"lr": 0.5, "ca_lr": 2.0, "epochs": 3}, {"lr": 0.025})
    model = torch.nn.Linear(2, 2)
    with pytest.raises(UserError) as e:
        epoch(watch, fake_strategy(loss=torch.tensor(float("inf")), model=model))
    assert str(e.value).startswith(
        "ease diverged: the training loss became inf in task 3, "
        "epoch 5 (iteration 7). The likely cause is a learning "
        "rate too large (ease.lr = 0.5 (the card's default: "
        "0.025), ease.ca_lr = 2)"
    )
    epoch(watch, fake_strategy(loss=torch.tensor(1e30), model=model))  # large: not diverged
    evaluation = fake_strategy(mb_output=torch.tensor([[float("nan"), 0.0]]))
    watch.before_eval_exp(evaluation)
    watch.after_eval_forward(evaluation)
    with pytest.raises(UserError, match="non-finite predictions .* after training task 3"):
        watch.after_eval_exp(evaluation)
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    with pytest.raises(UserError, match="a trained weight became inf or NaN .* task 3, epoch 5"):
        epoch(watch, fake_strategy(loss=torch.tensor(1.0), model=model))


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> tuple[Path, dict]:
    """A clean SimpleCIL result: its path and record."""
    out = tmp_path_factory.mktemp("clean")
    result = invoke("run", "--out", str(out), *RUN, "--methods", "simplecil")
    assert result.exit_code == 0, result.output
    path = result_files(out)[0]
    return path, results.load(path)


@pytest.mark.parametrize(
    ("where", "value", "problem"),
    [
        (("config", "method", "batch_size"), math.inf, "config.method.batch_size is inf"),
        (("memory", "peak_rss_bytes"), math.nan, "memory.peak_rss_bytes is nan"),
        (
            ("protocol", "settings", "eval_batch_size"),
            -math.inf,
            "protocol.settings.eval_batch_size is -inf",
        ),
    ],
)
def test_every_number_of_a_record_is_finite(record, where, value, problem):
    path, clean = record
    assert problems(clean, path) == []
    bad = json.loads(json.dumps(clean))
    node = bad
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    assert problems(bad) == [f"{problem}, not a finite number"]
    bad["extra"] = {"x": [1.0, math.nan]}
    assert "extra.x[1] is nan, not a finite number" in problems(bad)


def test_an_invalid_record_is_never_written(record, tmp_path):
    """run_once checks the record before writing it: a NaN accuracy fails the run."""
    path, clean = record
    target = tmp_path / path.relative_to(path.parents[3])
    bad = json.loads(json.dumps(clean))
    bad["acc_seen"][0] = math.nan
    with pytest.raises(
        UserError,
        match=r"finished but its record is not a valid result "
        r"\(acc_seen\[0\] is nan, not a finite number",
    ):
        results.run_once(target, lambda: bad)
    assert not target.exists()
    assert results.read_failure(target)["error"]["type"] == "UserError"
    attempt = results.run_once(target, lambda: clean)
    assert attempt.state == "ran" and results.is_done(target)
    assert results.read_failure(target) is None
