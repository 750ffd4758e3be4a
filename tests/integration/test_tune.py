"""cl-bench tune: an Optuna search scored on a validation split, never the test split;
resumable; its record; run --tuned and --tuned-on; reports mark tuned rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cl_bench
from cl_bench.api.tune import tune
from cl_bench.cards.places import BENCHMARKS_DIR
from cl_bench.errors import UserError
from cl_bench.reporting.summary import summary_table
from cl_bench.store.records import Result
from tests.helpers.cards import card_variant
from tests.helpers.cli import invoke, refused
from tests.helpers.trees import make_tree

TINY = {"backbone": "vit_tiny_patch16_224", "weights": "random", "image_size": 32}
COMMON = {**TINY, "precision": "fp32", "echo": None}
FIXED = {"tosca.epochs": 2}
SPACE = ["tosca.lr=1e-3..1e-1:log"]


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("tune")
    record = tune(
        "tosca", "synthetic", trials=3, space=SPACE, settings=FIXED, out=out / "tune", **COMMON
    )
    return out, record


def test_every_trial_is_scored_on_the_validation_split(searched):
    out, record = searched
    trials = record["trials"]
    assert [t["state"] for t in trials] == ["complete"] * 3
    assert record["best"]["value"] == max(t["value"] for t in trials)
    assert record["test_split_read"] is False and record["validation"] == 0.1
    for t in trials:
        (path,) = t["runs"]
        run = Result.from_file(path)
        assert run.config["validation"] == {"fraction": 0.1, "seed": 0}
        assert run.marks == " [validation]"  # a report never passes it off as a test score
        assert run.config["method"]["lr"] == t["params"]["lr"] and run.avg_acc == t["value"]
        # synthetic: 24 training images per class, 10 % held out -> 2 per class (round 2.4),
        # the 8 test images per class never appear: 2 classes per task, 4 images per task
        assert run.acc_matrix[0][0] * 4 / 100 == round(run.acc_matrix[0][0] * 4 / 100)
    test_run = cl_bench.run("tosca", "synthetic", settings=FIXED, out=out / "test", **COMMON)[0]
    assert test_run.config["data"] != run.config["data"] and "validation" not in test_run.config
    assert record["cost"]["runs"] == 3 and record["cost"]["train_s"] > 0


def test_the_same_call_resumes_and_reruns_an_interrupted_trial(searched):
    import optuna

    out, first = searched
    folder = Path(first["path"]).parent
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(folder / "journal.log"))
    )
    study = optuna.load_study(study_name="tune", storage=storage)
    left = study.ask()  # a trial a killed search left running
    left.suggest_float("lr", 1e-3, 1e-1, log=True)
    again = tune(
        "tosca", "synthetic", trials=4, space=SPACE, settings=FIXED, out=out / "tune", **COMMON
    )
    assert again["path"] == first["path"]
    rows = again["trials"]
    assert rows[:3] == first["trials"]  # kept, not rerun
    assert rows[3]["state"] == "interrupted"
    assert rows[4]["state"] == "complete" and rows[4]["params"] == left.params
    assert again["cost"]["interrupted_trials"] == 1


def test_run_tuned_takes_the_best_settings_and_is_marked(searched):
    out, record = searched
    done = cl_bench.run(
        ["tosca", "simplecil"],
        "synthetic",
        settings=FIXED,
        out=out / "tuned",
        tuned=True,
        tuned_from=out / "tune",
        **COMMON,
    )
    tosca = next(r for r in done if r.method == "tosca")
    best = json.loads(Path(record["path"]).read_text())["best"]  # after the resumed trials
    assert tosca.config["method"]["lr"] == best["params"]["lr"]
    assert tosca.config["tuned"] == {"on": "synthetic", "study": Path(record["path"]).parent.name}
    assert tosca.tuned == "tuned" and tosca.marks == " [tuned]"
    assert "validation" not in tosca.config
    assert "tosca [tuned]" in summary_table(done)
    simplecil = next(r for r in done if r.method == "simplecil")
    assert simplecil.tuned == ""  # nothing to tune: run as it is
    with pytest.raises(UserError, match="replaces a setting the search chose"):
        cl_bench.run(
            "tosca", "synthetic", settings={"tosca.lr": 0.1}, tuned=True,
            tuned_from=out / "tune", out=out / "tuned", **COMMON,
        )  # fmt: skip


def test_tuned_on_another_scenario_is_marked_with_it(searched, tmp_path):
    out, _ = searched
    args = {"n_classes": 6, "train_per_class": 10, "test_per_class": 4, "size": 32, "seed": 1}
    folder = card_variant(tmp_path, BENCHMARKS_DIR, "synthetic", "other", dataset_args=args)
    with cl_bench.api.cards([folder]):
        (run,) = cl_bench.run(
            "tosca", "other", settings=FIXED, out=out / "cross", tuned="synthetic",
            tuned_from=out / "tune", **COMMON,
        )  # fmt: skip
        assert run.tuned == "tuned on synthetic"
        with pytest.raises(UserError, match="no finished search of tosca on other"):
            cl_bench.run("tosca", "other", tuned=True, tuned_from=out / "tune", **COMMON)


def test_the_test_split_is_never_read(tmp_path):
    """Test images that do not decode: a run fails on them; a search never meets them."""
    tree = make_tree(tmp_path / "tree", ["a", "b", "c", "d"], n_train=5, n_test=2)
    for image in (tree / "test").rglob("*.jpg"):
        image.write_bytes(b"not an image, the same size? no: any bytes at all")
    split = ["--set", "scenario.init_cls=2", "--set", "scenario.increment=2"]
    common = ["--scenario", "imagefolder", "--data-root", str(tree), "--image-size", "32",
              "--backbone", "vit_tiny_patch16_224", "--weights", "random", "--no-progress",
              "--precision", "fp32", *split]  # fmt: skip
    found = invoke(
        "tune", "--method", "tosca", *common, "--trials", "2", "--validation", "0.4",
        "--space", "tosca.lr=1e-3..1e-1:log", "--set", "tosca.epochs=1",
        "--results", str(tmp_path / "tune"),
    )  # fmt: skip
    assert found.exit_code == 0, found.output
    (record,) = (tmp_path / "tune").rglob("tune.json")
    assert [t["state"] for t in json.loads(record.read_text())["trials"]] == ["complete"] * 2
    ran = invoke("run", "--methods", "tosca", *common, "--out", str(tmp_path / "runs"))
    refused(ran, "test")


def test_bad_searches_are_refused(tmp_path):
    for kwargs, needle in (
        ({"validation": 0.0}, "needs a validation split"),
        ({"objective": "best"}, "--objective 'best' is not one of avg, last"),
        ({"space": ["l2p.lr=0.1..1"]}, "must name a setting of tosca"),
        ({"settings": {"tosca.lr": 0.01}}, "tosca.lr is both searched and fixed"),
    ):
        with pytest.raises(UserError, match=needle):
            tune("tosca", "synthetic", trials=1, out=tmp_path, **{**COMMON, **kwargs})
    with pytest.raises(UserError, match="no search space"):
        tune("simplecil", "synthetic", trials=1, out=tmp_path, **COMMON)
    assert not any(tmp_path.iterdir())


def test_trials_run_as_a_grid_on_local_workers(tmp_path):
    record = tune(
        "tosca", "synthetic", trials=2, space=SPACE, settings={"tosca.epochs": 1},
        out=tmp_path, options=cl_bench.api.launch_options("local", jobs=2), **COMMON,
    )  # fmt: skip
    trials = record["trials"]
    assert [t["state"] for t in trials] == ["complete"] * 2
    for t in trials:
        (path,) = t["runs"]
        assert Result.from_file(path).config["method"]["lr"] == t["params"]["lr"]
