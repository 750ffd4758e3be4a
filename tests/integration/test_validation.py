"""Everything a command could be refused for is refused before it writes anything:
exit code 2, one paragraph on stderr naming the problem, no traceback, and nothing
under --out (no runs/, grid file, lock or failure record)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cl_bench.cards import catalogue
from cl_bench.cards.card import is_number
from cl_bench.cards.catalogue import load_method, load_scenario, method_names, scenario_names
from cl_bench.cards.places import ROOT
from cl_bench.engine import environment
from cl_bench.store import results
from tests.helpers.cli import TREE, invoke, refused
from tests.helpers.trees import image_tree

SYN = ["--scenario", "synthetic", "--no-progress", "--precision", "fp32"]
VIT = ["--backbone", "vit_tiny_patch16_224", "--weights", "random"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--set", "tosca.epochs=-1"], "tosca.epochs = -1 is out of range: it must be at least 1"),
        (["--set", "tosca.epochs=0"], "tosca.epochs = 0 is out of range: it must be at least 1"),
        (["--set", "tosca.lr=0"], "tosca.lr = 0.0 is out of range: it must be greater than 0"),
        (["--set", "tosca.lr=-1"], "tosca.lr = -1.0 is out of range: it must be greater than 0"),
        (["--set", "tosca.batch_size=0"], "tosca.batch_size = 0 is out of range"),
        (["--set", "simplecil.eval_batch_size=0"], "simplecil.eval_batch_size = 0 is out of range"),
        (["--set", "tosca.momentum=1.5"], "at least 0 and at most 1"),
        (["--set", "tosca.mlp_ratio=0"], "tosca.mlp_ratio = 0 is out of range"),
        (["--set", "tosca.l1=-0.1"], "tosca.l1 = -0.1 is out of range"),
        (["--set", "scenario.init_cls=0"], "synthetic.init_cls = 0 is out of range"),
        (["--set", "scenario.increment=-2"], "synthetic.increment = -2 is out of range"),
        (["--set", "scenario.test_shuffle=1"], "expected a bool"),
        (
            ["--scenario", "cifar100", "--set", "scenario.normalize=imagenet"],
            'cifar100.normalize = "imagenet" is not allowed; choose one of none, backbone',
        ),
        (["--set", "scenario.dataset_args={size: 2}"], "synthetic.dataset_args.size = 2 is out"),
        (["--set", "scenario.dataset_args={seed: 4294967296}"], "at most 4294967295"),
        (
            ["--methods", "l2p", *VIT, "--set", "l2p.pool_size=3"],
            "l2p.top_k = 5 is out of range: it must be at least 1 and at most pool_size (3)",
        ),
        (["--methods", "ewc", "--set", "ewc.importance_max=0"], "ewc.importance_max = 0.0 is out"),
        (
            ["--methods", "coda-prompt", *VIT, "--set", "coda-prompt.n_tasks=200"],
            "coda-prompt: 200 tasks do not fit pool_size 100 (at least one component per "
            "task); raise coda-prompt.pool_size or use fewer tasks",
        ),
    ],
)
def test_setting_out_of_range(tmp_path, args, needle):
    out = tmp_path / "out"
    refused(invoke("run", "--out", str(out), *SYN, *args), needle, out)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--image-size", "0"], "--image-size 0: the input resolution must be a positive"),
        (["--image-size", "-32"], "--image-size -32: the input resolution must be a positive"),
        (
            ["--methods", "l2p", *VIT, "--image-size", "7"],
            "must be a multiple of 16 (e.g. 16 or 32)",
        ),
        (
            ["--methods", "l2p", *VIT, "--image-size", "40"],
            "must be a multiple of 16 (e.g. 32 or 48)",
        ),
        (
            ["--methods", "l2p", *VIT, "--image-size", "32", "--set", "l2p.checkpoint_blocks=13"],
            "checkpoint_blocks = 13, but vit_tiny_patch16_224 has 12 blocks",
        ),
        (
            [
                "--methods",
                "dualprompt",
                *VIT,
                "--image-size",
                "32",
                "--set",
                "dualprompt.e_layers=[2, 12]",
            ],
            "must list distinct block indices 0 to 11",
        ),
        (
            [
                "--methods",
                "dualprompt",
                *VIT,
                "--image-size",
                "32",
                "--set",
                "dualprompt.g_layers=[1, 2]",
            ],
            "must not share a block",
        ),
        (
            [
                "--methods",
                "coda-prompt",
                *VIT,
                "--image-size",
                "32",
                "--set",
                "coda-prompt.length=5",
            ],
            "needs an even length",
        ),
    ],
)
def test_backbone_dependent_settings(tmp_path, args, needle):
    out = tmp_path / "out"
    refused(invoke("run", "--out", str(out), *SYN, *args), needle, out)


@pytest.mark.parametrize("seeds", ["-1", "1993,4294967296", str(2**40)])
def test_seed_out_of_numpy_range(tmp_path, seeds):
    out = tmp_path / "out"
    refused(
        invoke("run", "--out", str(out), *SYN, "--seeds", seeds),
        "a seed must be an integer from 0 to 4294967295",
        out,
    )


def test_seed_range_edges_accepted():
    from cl_bench.input_checks import check_seeds

    check_seeds([0, 2**32 - 1])


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda t: t / "file", "is a file, not a folder"),
        (lambda t: t / "file" / "sub", "which is a file, not a folder"),
        (
            lambda t: Path("/proc/cl-bench-validate/out"),
            "cannot be written (it would be created in /proc)",
        ),
    ],
)
def test_out_not_writable(tmp_path, make, needle):
    (tmp_path / "file").write_text("keep me")
    out = make(tmp_path)
    refused(invoke("run", "--out", str(out), *SYN), needle)
    assert (tmp_path / "file").read_text() == "keep me"
    assert not out.is_dir() and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_feature_cache_not_writable(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("")
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    refused(
        invoke("run", "--out", str(out), *SYN),
        f"The feature cache ($CL_BENCH_CACHE) {tmp_path / 'cache'} is a file",
        out,
    )


def test_bf16_on_cpu_without_bf16_units(tmp_path, monkeypatch):
    monkeypatch.setattr(environment, "cpu_has_bf16", lambda: False)
    out = tmp_path / "out"
    result = invoke("run", "--out", str(out), *SYN, "--device", "cpu", "--precision", "bf16")
    refused(result, "bf16 would be emulated, roughly 10-20x slower", out)
    assert "--precision fp32, or auto" in result.stderr
    assert environment.resolve_precision("auto", environment.torch.device("cpu")) == "fp32"


STRATEGY = "strategy: cl_bench.strategies.simplecil:SimpleCIL\n"
DEFAULTS = "defaults: {batch_size: 8, eval_batch_size: 8}\n"
BOUNDS = "bounds: {batch_size: [1, null], eval_batch_size: [1, null]}\n"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "strategy: cl_bench.strategies.nothere:X\n" + DEFAULTS,
            "strategy cl_bench.strategies.nothere:X cannot be imported: no module named",
        ),
        (
            "strategy: cl_bench.strategies.simplecil:Nope\n" + DEFAULTS,
            "module cl_bench.strategies.simplecil has no 'Nope'",
        ),
        ("strategy: cl_bench.strategies.simplecil:annotations\n" + DEFAULTS, "not a class"),
        ("strategy: cl_bench.strategies.simplecil\n" + DEFAULTS, 'must be "package.module:Class"'),
        (DEFAULTS, "lacks `strategy:`, which every method card needs"),
        (STRATEGY, "lacks `defaults:`, which every method card needs"),
        (STRATEGY + "defaults: [batch_size, 8]\n", "`defaults:` must be a mapping"),
        ("- just\n- a list\n", "must hold a YAML mapping"),
        (
            STRATEGY + DEFAULTS.replace("8}", "0}") + BOUNDS,
            "the card's default broken.eval_batch_size = 0 is out of range",
        ),
        (STRATEGY + DEFAULTS + "bounds: {batch_size: 1}\n", "bounds of batch_size must be"),
        (STRATEGY + DEFAULTS + "bounds: {batchsize: [1, null]}\n", "its rules name batchsize"),
        (STRATEGY + DEFAULTS + "positive: batch_size\n", "`positive:` must be a list"),
    ],
)
def test_broken_method_card(tmp_path, monkeypatch, text, needle):
    cards = tmp_path / "methods"
    cards.mkdir(exist_ok=True)
    (cards / "broken.yaml").write_text(text)
    monkeypatch.setattr(catalogue, "METHODS_DIR", cards)
    out = tmp_path / "out"
    result = invoke("run", "--methods", "broken", "--out", str(out), *SYN)
    refused(result, needle, out)
    assert str(cards / "broken.yaml") in result.stderr


def test_non_utf8_card(tmp_path, monkeypatch):
    cards = tmp_path / "methods"
    cards.mkdir(exist_ok=True)
    (cards / "broken.yaml").write_bytes(b"title: caf\xe9\n" + (STRATEGY + DEFAULTS).encode())
    monkeypatch.setattr(catalogue, "METHODS_DIR", cards)
    out = tmp_path / "out"
    refused(
        invoke("run", "--methods", "broken", "--out", str(out), *SYN),
        f"{cards / 'broken.yaml'} is not UTF-8 text (byte 0xe9 at offset 10)",
        out,
    )


@pytest.mark.parametrize(
    ("kind", "folder", "good", "needs"),
    [
        ("methods", "METHODS_DIR", "tosca", "strategy, defaults"),
        ("scenarios", "BENCHMARKS_DIR", "synthetic", "dataset, init_cls, increment, test_shuffle"),
    ],
)
def test_list_survives_a_broken_card(tmp_path, monkeypatch, kind, folder, good, needs):
    """`list` is an inventory: it lists every good card, then names each bad one and
    exits 2, so the damage is neither hidden nor able to hide the other cards."""
    cards = tmp_path / kind
    cards.mkdir(exist_ok=True)
    shutil.copy(getattr(catalogue, folder) / f"{good}.yaml", cards)
    (cards / "broken.yaml").write_text("dataset: synthetic\n" + STRATEGY)
    monkeypatch.setattr(catalogue, folder, cards)
    result = invoke("list", kind)
    assert result.exit_code == 2
    assert result.stdout.split()[0] == good and "broken" not in result.stdout
    missing = "`defaults:`" if kind == "methods" else "`init_cls:`, `increment:`, `test_shuffle:`"
    assert result.stderr == (
        f"error: {cards / 'broken.yaml'} lacks {missing}, which every "
        f"{kind[:-1]} card needs ({needs}).\n"
    )


@pytest.mark.parametrize(
    ("drop", "add", "needle"),
    [
        ("test_shuffle: true\n", "", "lacks `test_shuffle:`, which every scenario card needs"),
        (
            "init_cls: 2\n",
            "init_cls: 0\n",
            "the card's default broken.init_cls = 0 is out of range",
        ),
        ("test_shuffle: true\n", "test_shuffle: 1\n", 'broken.test_shuffle = "1" is not allowed'),
    ],
)
def test_broken_scenario_card(tmp_path, monkeypatch, drop, add, needle):
    cards = tmp_path / "benchmarks"
    cards.mkdir(exist_ok=True)
    text = (ROOT / "benchmarks" / "synthetic.yaml").read_text()
    assert drop in text
    (cards / "broken.yaml").write_text(text.replace(drop, add))
    monkeypatch.setattr(catalogue, "BENCHMARKS_DIR", cards)
    out = tmp_path / "out"
    refused(invoke("run", "--scenario", "broken", "--out", str(out), "--no-progress"), needle, out)


def test_empty_image_refused_before_planning(tmp_path):
    root = image_tree(tmp_path / "data")
    (root / "test" / "b" / "1.png").write_bytes(b"")
    out = tmp_path / "out"
    refused(
        invoke("run", "--out", str(out), "--data-root", str(root), *TREE),
        f"1 image file(s) cannot be used: {root / 'test' / 'b' / '1.png'} (empty)",
        out,
    )


def test_image_spoiled_after_the_decode_check_fails_its_runs_alone(tmp_path, monkeypatch):
    """Every image is decoded once before a run (tests/integration/test_data_trees.py),
    and a dataset that passed is remembered by its fingerprint (names, sizes, times); an
    image spoiled after that, keeping its size and time, is met by the runs: each fails
    alone with a failure record, leaves no held lock, and the next run of the grid still
    starts."""
    from cl_bench.engine import runner

    monkeypatch.setattr(runner, "check_decodes", lambda *args: None)  # it passed before
    root = image_tree(tmp_path / "data")
    bad = root / "train" / "a" / "0.png"
    bad.write_bytes(b"not a png at all")
    out = tmp_path / "out"
    result = invoke("run", "--out", str(out), "--data-root", str(root), *TREE, "--seeds", "1,2")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.stdout.count("FAILED simplecil seed") == 2
    assert (
        "2 run(s) failed (imagefolder/simplecil seed 1, imagefolder/simplecil seed 2)"
        in result.stderr
    )
    grid = json.loads(next((out / "runs" / "_grids").glob("*.json")).read_text())
    assert len(grid["runs"]) == 2
    for rel in grid["runs"]:
        path = out / rel
        assert not path.exists()
        failure = results.read_failure(path)
        assert failure["error"]["type"] == "UserError"
        assert f"Cannot read image {bad}" in failure["error"]["last_line"]
        assert results.probe_lock(path).held is False


def test_check_refuses_a_bad_baseline_before_running_the_suite(tmp_path):
    out = tmp_path / "out"
    missing = tmp_path / "none.json"
    refused(
        invoke("check", "--suite", "ci", "--baseline", str(missing), "--out", str(out)),
        f"Baseline {missing} does not exist",
        out,
    )
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    refused(
        invoke("check", "--suite", "ci", "--baseline", str(broken), "--out", str(out)),
        f"Baseline {broken} is not readable JSON",
        out,
    )
    partial = tmp_path / "partial.json"
    base = json.loads((ROOT / "results" / "baselines" / "ci.json").read_text())
    del base["metrics"]["synthetic-prompts/l2p"]
    partial.write_text(json.dumps(base))
    refused(
        invoke("check", "--suite", "ci", "--baseline", str(partial), "--out", str(out)),
        "has no value for synthetic-prompts/l2p avg_acc, synthetic-prompts/l2p last_acc "
        "of suite ci",
        out,
    )


def test_report_out_not_writable(tmp_path):
    (tmp_path / "file").write_text("")
    refused(
        invoke("report", "--results", str(tmp_path), "--out", str(tmp_path / "file")),
        f"--out {tmp_path / 'file'} is a file, not a folder",
    )


def numeric_settings(params: dict, prefix: str = "") -> list[str]:
    """Dotted keys of every number among the settings (one mapping level deep)."""
    keys = []
    for key, value in params.items():
        if isinstance(value, dict) and not prefix:
            keys += numeric_settings(value, f"{key}.")
        elif is_number(value):
            keys.append(prefix + key)
    return keys


def test_every_card_loads_and_bounds_every_number():
    """The shipped cards satisfy their own rules (load checks the defaults), and no
    numeric setting is left unbounded; the CI suite's --set values pass too."""
    for card in [*map(load_method, method_names()), *map(load_scenario, scenario_names())]:
        rules = card.rules()
        unbounded = [
            k
            for k in numeric_settings(card.params)
            if k not in rules["bounds"] and k not in rules["positive"]
        ]
        assert unbounded == [], f"{card.path}: {unbounded}"
        assert card.problems() == []
    from cl_bench.engine.runner import RunRequest, resolve_cards
    from cl_bench.gate.suite import load_suite

    for entry in load_suite("ci")["runs"]:
        resolve_cards(
            RunRequest(
                methods=entry["methods"],
                scenario=entry["scenario"],
                backbone=entry["backbone"],
                sets=entry.get("sets", []),
            )
        )


@pytest.mark.parametrize("methods", [",", " , "])
def test_methods_naming_nothing_is_refused(tmp_path, methods):
    """An empty --methods is a mistake, not a request for the default set."""
    out = tmp_path / "out"
    refused(
        invoke("run", "--out", str(out), "--scenario", "synthetic", "--methods", methods),
        "names no method",
        out,
    )
