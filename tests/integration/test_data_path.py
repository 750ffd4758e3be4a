"""The data path that feeds a GPU, end to end: a run on an image tree decodes each test
image once, not per evaluation (the rest of the data path: tests/unit/test_data_path.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from cl_bench.engine import runner
from cl_bench.scenarios import transforms
from cl_bench.scenarios.transforms import eval_transform
from tests.helpers.cli import invoke
from tests.helpers.trees import make_tree


def test_an_on_disk_run_decodes_each_test_image_once_not_per_evaluation(tmp_path, monkeypatch):
    """Three tasks of one class, two methods: with the test set decoded once, each test
    image is decoded twice in all (the decode check, then once for every method and
    evaluation), and evaluations, which read tensors, fork no loader worker; read from
    its file at each evaluation, as before, it is decoded once per evaluation that sees
    its class, through the training's worker. The accuracies are the same."""
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path / "cache"))
    root = make_tree(tmp_path / "tree", ["a", "b", "c"], n_train=3, n_test=2)
    log = tmp_path / "decoded.log"
    decode = transforms.decode

    def counted(path: str):  # appends are whole lines, from worker processes too
        with open(log, "a") as f:
            f.write(f"{path}\n")
        return decode(path)

    monkeypatch.setattr(transforms, "decode", counted)
    loaders = []  # (training, evaluation) loader arguments of each run's drive
    drive = runner.drive

    def recorded(strategy, stream, **kwargs):
        loaders.append((kwargs["loader_args"], kwargs["eval_args"]))
        return drive(strategy, stream, **kwargs)

    monkeypatch.setattr(runner, "drive", recorded)
    args = [
        "--scenario",
        "imagefolder",
        "--data-root",
        str(root),
        "--backbone",
        "vit_tiny_patch16_224",
        "--weights",
        "random",
        "--image-size",
        "32",
        "--precision",
        "fp32",
        "--no-progress",
        "--set",
        "scenario.init_cls=1",
        "--set",
        "scenario.increment=1",
    ]

    def run(out: Path, methods: str) -> tuple[Counter, dict]:
        log.write_text("")
        sets = [
            a
            for m in methods.split(",")
            for a in ("--set", f"{m}.epochs=1", "--set", f"{m}.batch_size=4")
        ]
        result = invoke("run", "--out", str(out), *args, "--methods", methods, *sets)
        assert result.exit_code == 0, result.output
        found = {
            json.loads(p.read_text())["method"]: json.loads(p.read_text())
            for p in out.glob("runs/*/*/*.json")
        }
        return Counter(log.read_text().split()), found

    tests = sorted(str(p) for p in (root / "test").rglob("*.jpg"))
    once, records = run(tmp_path / "once", "finetune,ewc")
    assert {p: once[p] for p in tests} == {p: 2 for p in tests}  # the check, then once
    one, none = {"num_workers": 1, "pin_memory": False}, {"num_workers": 0, "pin_memory": False}
    assert loaders == [(one, none)] * 2

    monkeypatch.setattr(
        runner,
        "eval_inputs",
        lambda data, size, progress: (data.test_x, eval_transform(True, size)),
    )  # the files, as before
    per_evaluation, before = run(tmp_path / "files", "finetune")  # no check: remembered
    assert loaders[2:] == [(one, one)]
    order = records["finetune"]["class_names"]
    for p in tests:
        evaluations = 3 - order.index(Path(p).parent.name)  # tasks that have seen its class
        assert per_evaluation[p] == evaluations, p
    assert records["finetune"]["acc_matrix"] == before["finetune"]["acc_matrix"]
    assert records["finetune"]["config"] == before["finetune"]["config"]  # same file name
