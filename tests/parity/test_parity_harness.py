"""bench/parity: the interval arithmetic, the verdict rule, the results schema, the
row runner (on a toy row and a toy git reference, no real reference needed) and the
generated bench/parity.md being current."""

from __future__ import annotations

import subprocess
import types
from pathlib import Path

import pytest
from scipy import stats as sps

import bench.parity.__main__ as runner
from bench.parity import render, schema, stats


def test_paired_interval_is_the_t_interval_of_the_differences():
    block = stats.interval([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], "paired")
    # differences 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.302653
    assert block["mean_diff"] == pytest.approx(2.0)
    assert block["ci95"] == pytest.approx([2 - 4.302653 / 3**0.5, 2 + 4.302653 / 3**0.5], abs=1e-5)
    ours, ref = [70.1, 68.3, 71.0, 69.4], [69.0, 68.9, 70.2, 68.1]
    want = sps.ttest_rel(ours, ref).confidence_interval()
    assert stats.interval(ours, ref, "paired")["ci95"] == pytest.approx([want.low, want.high])


def test_welch_interval_matches_scipy():
    ours, ref = [1.0, 2.0, 3.0], [2.0, 4.0, 6.0]
    block = stats.interval(ours, ref, "welch")
    want = sps.ttest_ind(ours, ref, equal_var=False).confidence_interval()
    assert block["mean_diff"] == pytest.approx(-2.0)
    assert block["ci95"] == pytest.approx([want.low, want.high])
    # dof = (5/3)^2 / ((1/3)^2/2 + (4/3)^2/2) = 50/17
    half = sps.t.ppf(0.975, 50 / 17) * (5 / 3) ** 0.5
    assert block["ci95"] == pytest.approx([-2 - half, -2 + half])


@pytest.mark.parametrize(
    "ci, agrees",
    [
        ([-0.9, 0.9], True),  # inside +-1
        ([0.2, 0.95], True),  # inside +-1 without 0
        ([-0.5, 2.4], True),  # contains 0, width 2.9
        ([-0.5, 2.6], False),  # contains 0, width 3.1
        ([0.2, 1.5], False),  # neither
    ],
)
def test_verdict_rule(ci, agrees):
    assert stats.agrees(ci) is agrees


def test_identical_sides_agree_with_a_zero_interval():
    per_seed = [
        {"seed": s, "ours": {"curve": [90.0, 80.0 + s]}, "reference": {"curve": [90.0, 80.0 + s]}}
        for s in range(10)
    ]
    block = stats.paired_block(per_seed, "paired", [1, 0])
    assert block["avg"] == {"mean_diff": 0.0, "ci95": [0.0, 0.0]}
    assert stats.verdict(block) == "agrees"


def _toy_reference(tmp_path: Path) -> tuple[Path, str]:
    ref = tmp_path / "toy-ref"
    ref.mkdir()
    (ref / "model.py").write_text("SCALE = 1.0\n")
    git = ["git", "-C", str(ref), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "model.py"], check=True)
    subprocess.run(git + ["commit", "-qm", "toy"], check=True)
    head = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True)
    return ref, head.stdout.strip()


def _toy_row(commit: str, calls: list) -> types.ModuleType:
    row = types.ModuleType("toy")
    row.METHOD, row.PAIRING, row.PAIRING_WHY = "toy", "paired", "the seed is shared."
    row.REFERENCE = {"repo": "someone/toy", "commit": commit}
    row.SETTING, row.CLASS_ORDER, row.SEEDS = {"epochs": 1}, [1, 0], list(range(10))

    def prepare(copy: Path) -> None:
        text = (copy / "model.py").read_text()
        (copy / "model.py").write_text(text.replace("1.0", "0.5"))

    def step(copy: Path, work: Path) -> dict:
        return {
            "after": list(schema.AFTER),
            "max_abs_param": [0.0, 1e-7, 2e-7],
            "max_abs_loss": [0.0, 0.0, 1e-7],
            "max_abs_logit": [1e-7, 1e-7, 3e-7],
            "bound": 1e-6,
            "bound_why": "toy",
            "kept": [],
        }

    def run_seed(copy: Path, work: Path, seed: int) -> dict:
        calls.append(seed)
        scale = float((copy / "model.py").read_text().split("=")[1])
        return {
            "ours": {"curve": [90.0, 80.0 + seed * scale]},
            "reference": {"curve": [90.0, 80.0 + seed * scale - 0.1]},
        }

    row.prepare, row.step, row.run_seed = prepare, step, run_seed
    return row


def test_runner_writes_a_checked_results_file_and_resumes(tmp_path, monkeypatch):
    ref, commit = _toy_reference(tmp_path)
    calls: list = []
    monkeypatch.setattr(runner, "load_row", lambda m: _toy_row(commit, calls))
    args = [
        "toy",
        "--reference",
        str(ref),
        "--scratch",
        str(tmp_path / "s"),
        "--out",
        str(tmp_path / "out"),
    ]
    assert runner.main(args) == 0
    data = schema.load(tmp_path / "out" / "toy.json")
    assert calls == list(range(10))
    assert data["paired"]["avg"]["mean_diff"] == pytest.approx(0.05)
    assert data["paired"]["last"]["ci95"] == pytest.approx([0.1, 0.1])
    assert data["verdict"] == "agrees" and data["step"]["within_bound"] is True
    assert data["per_seed"][3]["ours"]["curve"] == [90.0, 81.5]  # the patched copy ran
    assert (ref / "model.py").read_text() == "SCALE = 1.0\n"  # the checkout did not
    assert runner.main(args) == 0
    assert calls == list(range(10)), "finished seeds are kept, not run again"


def test_a_rows_extra_keys_join_the_results_but_replace_none(tmp_path, monkeypatch):
    ref, commit = _toy_reference(tmp_path)
    row = _toy_row(commit, [])
    row.extra = lambda per_seed: {
        "gap": [r["ours"]["last"] for r in per_seed[:2]],
        "verdict": "replaced",
    }
    monkeypatch.setattr(runner, "load_row", lambda m: row)
    assert (
        runner.main(
            [
                "toy",
                "--reference",
                str(ref),
                "--scratch",
                str(tmp_path / "s"),
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    data = schema.load(tmp_path / "out" / "toy.json")
    assert data["gap"] == [80.0, 80.5] and data["verdict"] == "agrees"


def test_runner_refuses_wrong_commit_and_scratch_inside_repo(tmp_path, monkeypatch, capsys):
    ref, commit = _toy_reference(tmp_path)
    monkeypatch.setattr(runner, "load_row", lambda m: _toy_row("0" * 40, []))
    assert runner.main(["toy", "--reference", str(ref), "--scratch", str(tmp_path / "s")]) == 2
    assert f"is at commit {commit}" in capsys.readouterr().err
    monkeypatch.setattr(runner, "load_row", lambda m: _toy_row(commit, []))
    inside = runner.REPO / "build" / "parity-scratch"
    assert runner.main(["toy", "--reference", str(ref), "--scratch", str(inside)]) == 2
    assert "inside the repository" in capsys.readouterr().err
    assert not inside.exists()


def test_a_trial_writes_no_results_file(tmp_path, monkeypatch):
    ref, commit = _toy_reference(tmp_path)
    monkeypatch.setattr(runner, "load_row", lambda m: _toy_row(commit, []))
    assert (
        runner.main(
            [
                "toy",
                "--reference",
                str(ref),
                "--scratch",
                str(tmp_path / "s"),
                "--out",
                str(tmp_path / "out"),
                "--seeds",
                "3",
            ]
        )
        == 0
    )
    assert not (tmp_path / "out").exists()


def test_a_one_seed_trial_ends_without_an_interval(tmp_path, monkeypatch, capsys):
    ref, commit = _toy_reference(tmp_path)
    calls: list = []
    monkeypatch.setattr(runner, "load_row", lambda m: _toy_row(commit, calls))
    assert (
        runner.main(
            [
                "toy",
                "--reference",
                str(ref),
                "--scratch",
                str(tmp_path / "s"),
                "--out",
                str(tmp_path / "out"),
                "--seeds",
                "1",
            ]
        )
        == 0
    )
    assert calls == [0] and not (tmp_path / "out").exists()
    assert "a trial of one seed" in capsys.readouterr().out


def test_schema_refuses_what_the_tables_cannot_show(tmp_path):
    good = {
        "method": "x",
        "reference": {"repo": "a/b", "commit": "1" * 40},
        "step": None,
        "step_none_why": "trains nothing",
        "per_seed": [
            {"seed": s, "ours": {"curve": [1.0]}, "reference": {"curve": [1.0]}} for s in range(10)
        ],
        "paired": {
            "pairing": "paired",
            "class_order": [0],
            "n_seeds": 10,
            "avg": {"mean_diff": 0.0, "ci95": [0.0, 0.0]},
            "last": {"mean_diff": 0.0, "ci95": [0.0, 0.0]},
        },
        "verdict": "differs",
        "why": "because",
    }
    schema.check(good, "x")
    for broken, says in [
        ({"verdict": "differs", "why": ""}, "without 'why'"),
        ({"step_none_why": None}, "step_none_why"),
        ({"per_seed": good["per_seed"][:9]}, "at least 10"),
    ]:
        with pytest.raises(schema.ResultsError, match=says):
            schema.check({**good, **broken}, "x")
    (tmp_path / "x.json").write_text("{")
    with pytest.raises(schema.ResultsError, match="cannot be read"):
        schema.load(tmp_path / "x.json")


def test_parity_md_is_generated_from_the_results_files():
    results = schema.load_all()
    assert render.DOC.read_text() == render.render(results), (
        "bench/parity.md is stale: run python -m bench.parity.render"
    )
    for data in results:
        assert f"python -m bench.parity {data['method']} --reference" in render.DOC.read_text()


def test_a_damaged_kept_seed_is_run_again(tmp_path, monkeypatch):
    ref, commit = _toy_reference(tmp_path)
    calls: list = []
    monkeypatch.setattr(runner, "load_row", lambda m: _toy_row(commit, calls))
    args = [
        "toy",
        "--reference",
        str(ref),
        "--scratch",
        str(tmp_path / "s"),
        "--out",
        str(tmp_path / "out"),
    ]
    assert runner.main(args) == 0
    kept = sorted((tmp_path / "s" / "work" / "seeds").rglob("4.json"))
    assert len(kept) == 1
    kept[0].write_text('{"ours": {"curve": [')
    assert runner.main(args) == 0
    assert calls == list(range(10)) + [4]
    rerun = schema.load(tmp_path / "out" / "toy.json")["per_seed"][4]
    assert rerun["ours"]["curve"] == [90.0, 82.0]


def test_measured_row_seconds_counts_the_kept_seeds_own_time():
    """A call that reuses kept seeds is fast; ``row_seconds`` still says what the row
    costs from scratch: the step check plus each seed's time when it ran."""
    row = _toy_row("0" * 40, [])
    per_seed = []
    for seed in row.SEEDS:
        run = {
            "seed": seed,
            "ours": {"curve": [90.0, 80.0]},
            "reference": {"curve": [90.0, 79.0 + seed % 3]},
            "seconds": 12.5,
        }
        for side in ("ours", "reference"):
            run[side].update(stats.summary(run[side]["curve"]))
        per_seed.append(run)
    data = runner.assemble(row, row.step(Path("."), Path(".")), per_seed, 3.2, 40.0)
    assert data["measured"]["seconds"] == 3 and data["measured"]["row_seconds"] == 165
    assert "the row from scratch: 165 s" in "\n".join(render.section(data))


def test_own_randomness_comparison_is_rendered_beside_the_paired_one():
    row = _toy_row("0" * 40, [])
    per_seed = []
    for seed in row.SEEDS:
        run = {"seed": seed, "ours": {"curve": [90.0, 80.0]}, "reference": {"curve": [90.0, 80.0]}}
        for side in ("ours", "reference"):
            run[side].update(stats.summary(run[side]["curve"]))
        per_seed.append(run)
    data = runner.assemble(row, row.step(Path("."), Path(".")), per_seed, 1.0)
    own = stats.paired_block(
        [{"ours": {"curve": [91.0, 80.0]}, "reference": {"curve": [89.0, 80.0]}}] * 2
        + [{"ours": {"curve": [90.0, 80.0]}, "reference": {"curve": [90.0, 80.0]}}] * 2,
        "paired",
        [0, 1],
    )
    data["own_randomness"] = {**own, "verdict": stats.verdict(own), "why": "Because."}
    text = "\n".join(render.section(data))
    assert "own batch order and crops (paired, 4 seeds, per_seed.*.own): average +0.50 [" in text
    assert "last +0.00 [+0.00, +0.00]: agrees. Because." in text


def test_a_kept_seed_is_not_reused_after_the_code_changes(tmp_path, monkeypatch):
    for name in (
        "bench/parity/methods/toy/row.py",
        "cl_bench/strategies/toy.py",
        "methods/toy.yaml",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("a = 1\n")
    monkeypatch.setattr(runner, "REPO", tmp_path)
    row = types.SimpleNamespace(SETTING={"epochs": 1}, CLASS_ORDER=[0, 1], REFERENCE={"r": 1})
    first = runner._seed_file(row, tmp_path / "work", 3)
    assert runner._seed_file(row, tmp_path / "work", 3) == first
    assert first.name == "3.json"
    for name in (
        "cl_bench/strategies/toy.py",
        "methods/toy.yaml",
        "bench/parity/methods/toy/row.py",
    ):
        (tmp_path / name).write_text("a = 2\n")
        moved = runner._seed_file(row, tmp_path / "work", 3)
        assert moved.parent != first.parent
        first = moved
    row.SETTING = {"epochs": 2}
    assert runner._seed_file(row, tmp_path / "work", 3).parent != first.parent
