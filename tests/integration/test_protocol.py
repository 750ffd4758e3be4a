"""Scenario default backbones, `--protocol fair|paper` from the cards' paper: blocks, and
`cl-bench run --dry-run` (no data, no weights, no network)."""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import pytest

from cl_bench.cards import catalogue
from cl_bench.cards.catalogue import load_method, method_names
from cl_bench.cards.protocol import apply_protocol, paper_settings, run_scenario
from cl_bench.engine.environment import resolve_device, resolve_precision
from cl_bench.engine.runner import RunRequest, resolve_cards
from cl_bench.reporting.report import aggregate, load_runs
from cl_bench.store import record_check, results
from cl_bench.strategies.tosca import Tosca
from tests.helpers.cards import card_variant
from tests.helpers.cli import FAST, invoke, refused
from tests.helpers.trees import one_image_classes

# the README's headline command; the plan names the precision --precision auto picks
MISSION = ["run", "--methods", "tosca,l2p", "--scenario", "imagenet-a", "--dry-run"]
VIT_B = "backbone vit_base_patch16_224, weights vit_base_patch16_224.augreg_in21k"
ORDERED = "scenario.test_shuffle=false (paper)"
# the paper settings of the eight baseline cards, as their sources give them
PAPER = {
    "tosca": {
        "selection": "batch",
        "scenario.test_shuffle": False,
        "init": "official",
        "augment_views": 20,
    },
    "l2p": {"batchwise": True, "scenario.test_shuffle": False},
    "dualprompt": {"batchwise": True, "reshape_bug": True, "scenario.test_shuffle": False},
    **{
        name: {"scenario.test_shuffle": False}
        for name in ("coda-prompt", "simplecil", "finetune", "joint", "ewc")
    },
}
SMALL = [
    "--scenario",
    "synthetic",
    "--no-progress",
    "--precision",
    "fp32",
    "--set",
    "tosca.epochs=2",
]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No hub and an empty Hugging Face cache: nothing could load ViT weights."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


def small_tree(tmp_path: Path) -> list[str]:
    """--data-root of an imagenet-a tree of 200 one-image classes: a dry run reads the
    file names, sizes and times, and decodes nothing."""
    one_image_classes(tmp_path / "data" / "imagenet-a", 200)
    return ["--data-root", str(tmp_path / "data")]


def plan(*args: str) -> list[str]:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def auto_target() -> str:
    """The plan header's ``<device>/<precision>`` under ``--precision auto``, from the
    functions the runner decides with: cpu/bf16 on a CPU with bf16 units, else cpu/fp32."""
    device = resolve_device("auto")
    return f"{device.type}/{resolve_precision('auto', device)}"


@pytest.mark.precision_auto
def test_mission_command_plans_the_papers_backbone(tmp_path, offline):
    """The suite's headline command resolves to ViT-B/16 (IN21K) on imagenet-a, with no
    image decoded, no weights and no network; it writes nothing."""
    out, where = tmp_path / "out", small_tree(tmp_path)
    fair = plan(*MISSION, *where, "--out", str(out))
    assert fair[1] == f"imagenet-a: {VIT_B}, protocol fair, {auto_target()}, seeds 1993"
    assert [ln.split()[:4] for ln in fair[2:6:2]] == [
        ["pending", "tosca", "seed", "1993"],
        ["pending", "l2p", "seed", "1993"],
    ]
    assert fair[3].strip() == fair[5].strip() == "card defaults"
    assert fair[-1] == "2 runs planned: 0 done, 2 pending"

    paper = plan(*MISSION, *where, "--out", str(out), "--protocol", "paper")
    assert paper[1] == f"imagenet-a: {VIT_B}, protocol paper, {auto_target()}, seeds 1993"
    assert paper[3].strip() == (
        f"init=official (paper), selection=batch (paper), augment_views=20 (paper), {ORDERED}"
    )
    assert paper[5].strip() == f"batchwise=true (paper), {ORDERED}"
    assert paper[6] == "paper settings and their sources:"
    assert paper[7] == "  tosca:"
    assert paper[8].startswith("    selection=batch: official code models/tosca.py")
    fair_paths = {ln.split()[-1] for ln in fair[2:6:2]}
    paper_paths = {ln.split()[-1] for ln in paper[2:6:2]}
    assert all(p.startswith(f"{out}/runs/imagenet-a/") for p in fair_paths | paper_paths)
    assert not fair_paths & paper_paths  # paper and fair runs never share a result file
    assert not out.exists() and not (tmp_path / "hf").exists()


def test_backbone_and_weights_override_the_scenarios(tmp_path, offline):
    where = small_tree(tmp_path)
    head = plan(*MISSION, *where, "--backbone", "vit_tiny_patch16_224", "--out", str(tmp_path))[1]
    assert head.startswith(
        "imagenet-a: backbone vit_tiny_patch16_224, weights "
        "vit_tiny_patch16_224.augreg_in21k, protocol fair"
    )
    head = plan(*MISSION, *where, "--weights", "random", "--out", str(tmp_path))[1]
    assert head.startswith("imagenet-a: backbone vit_base_patch16_224, weights random,")
    # the embedded demo keeps EfficientNet-Lite0, so l2p is refused there as before
    refused(
        invoke("run", "--methods", "tosca,l2p", "--dry-run", "--out", str(tmp_path)),
        "l2p needs a VIT backbone (it injects prompts into transformer blocks), but "
        '"efficientnet_lite0" is a CNN',
    )


def test_absent_weights_file_leaves_the_path_unknown(tmp_path, offline):
    """Its digest names the result, so the dry run says why instead of guessing."""
    missing = tmp_path / "vit.safetensors"
    lines = plan(*MISSION, *small_tree(tmp_path), "--weights", str(missing), "--out", str(tmp_path))
    assert lines[2] == (
        f"  result paths unknown: the weights file {missing} is not on this "
        "machine (its digest names the result)"
    )
    assert lines[3].split() == ["unknown", "tosca", "seed", "1993"]
    assert lines[-1] == "2 runs planned: 0 done, 0 pending, 2 unknown"


def test_paper_resolves_each_cards_settings_and_fair_none():
    for name in method_names():
        card = load_method(name)
        assert "paper" in card.raw, f"{card.path} has no paper: block"
        defaults = copy.deepcopy(card.params)
        apply_protocol("fair", [card])
        assert (card.protocol, card.params, card.scenario_sets) == ("fair", defaults, {})
        settings = paper_settings(card)
        assert all(s.source.strip() for s in settings)
        paper = load_method(name)
        apply_protocol("paper", [paper])
        expected = {s.key: s.value for s in settings}
        if name in PAPER:
            assert expected == PAPER[name]
        assert paper.params == {
            **defaults,
            **{k: v for k, v in expected.items() if not k.startswith("scenario.")},
        }
        assert paper.scenario_sets == {
            k.removeprefix("scenario."): v for k, v in expected.items() if k.startswith("scenario.")
        }


def test_set_wins_over_the_preset():
    req = RunRequest(
        methods=["tosca", "l2p"],
        scenario="imagenet-a",
        protocol="paper",
        sets=["tosca.selection=sample", "scenario.test_shuffle=true"],
    )
    (tosca, l2p), scenario = resolve_cards(req)
    assert (tosca.params["selection"], tosca.params["init"]) == ("sample", "official")
    assert l2p.params["batchwise"] is True
    assert tosca.scenario_sets == l2p.scenario_sets == {}
    assert run_scenario(tosca, scenario).params["test_shuffle"] is True
    ordered = resolve_cards(RunRequest(methods=["tosca"], scenario="imagenet-a", protocol="paper"))
    (tosca,), scenario = ordered
    assert run_scenario(tosca, scenario).params["test_shuffle"] is False
    assert scenario.params["test_shuffle"] is True  # the per-run copy changed, not the card


def test_unknown_protocol_refused(tmp_path):
    refused(
        invoke("run", "--protocol", "oracle", *SMALL, "--out", str(tmp_path / "o")),
        'Unknown protocol "oracle". Known protocols: fair, paper.',
        tmp_path / "o",
    )


@pytest.mark.parametrize(
    ("block", "needle"),
    [
        (
            {"selecton": {"value": "batch", "source": "x"}},
            'paper setting selecton: tosca-x has no setting "selecton". Did you mean "selection"?',
        ),
        (
            {"selection": {"value": "oracle", "source": "x"}},
            'paper setting selection: tosca-x.selection = "oracle" is not allowed; choose one of '
            "sample, batch",
        ),
        (
            {"augment_views": {"value": -1, "source": "x"}},
            "paper setting augment_views: tosca-x.augment_views = -1 is out of range",
        ),
        (
            {"epochs": {"value": "many", "source": "x"}},
            "paper setting epochs: 'many' is not a int like the default (20)",
        ),
        ({"selection": {"value": "batch"}}, "paper setting selection must be {value: V, source:"),
        (
            {"scenario.init_cls": {"value": 5, "source": "x"}},
            'scenario setting "init_cls" cannot be set per method',
        ),
        (
            {"scenario.test_shuffle": {"value": "no", "source": "x"}},
            "'no' is not allowed; choose one of True, False",
        ),
    ],
)
def test_card_with_bad_paper_block_refused(tmp_path, block, needle):
    """Refused when loaded, naming the card and the key; nothing runs or is written."""
    cards = card_variant(tmp_path, catalogue.METHODS_DIR, "tosca", "tosca-x", paper=block)
    refused(invoke("list", "methods", "--cards", str(cards)), f"{cards / 'tosca-x.yaml'}: ")
    out = tmp_path / "out"
    result = invoke("run", "--cards", str(cards), "--methods", "tosca-x", *SMALL, "--out", str(out))
    refused(result, needle, out)


@pytest.mark.parametrize(
    ("backbone", "needle"),
    [
        ({"name": "vit_huge"}, "backbone 'vit_huge' is not a known backbone"),
        (
            {"name": "vit_base_patch16_224", "weights": "vit_base_patch16_224.augreg_in1k"},
            "are neither vit_base_patch16_224's pinned tag (vit_base_patch16_224.augreg_in21k)",
        ),
        ("vit_base_patch16_224", "`backbone:` must be {name: <backbone>"),
    ],
)
def test_scenario_card_with_bad_backbone_refused(tmp_path, backbone, needle):
    cards = card_variant(
        tmp_path, catalogue.BENCHMARKS_DIR, "synthetic", "syn-x", backbone=backbone
    )
    refused(invoke("list", "scenarios", "--cards", str(cards)), needle)


def records(out: Path) -> dict[tuple[str, str], dict]:
    found = {}
    for path in sorted(out.glob("runs/*/*/*.json")):
        record = json.loads(path.read_text())
        found[(record["method"], record["protocol"]["name"])] = record
    return found


def test_paper_run_records_its_protocol_and_the_dry_run_finds_it(tmp_path):
    """A small --protocol paper run (the default methods on a small embedded scenario),
    then a fair SimpleCIL run: the records name their protocol, their files differ,
    the dry run plans exactly their paths (done), and the report keeps them apart."""
    out = tmp_path / "out"
    small = [*SMALL[:3], "--image-size", "32", "--out", str(out)]
    paper_args = [
        *small,
        "--protocol",
        "paper",
        "--set",
        "tosca.epochs=2",
        "--set",
        "tosca.augment_views=2",
    ]
    result = invoke("run", *paper_args)
    assert result.exit_code == 0, result.output
    result = invoke("run", "--methods", "simplecil", *small)
    assert result.exit_code == 0, result.output
    found = records(out)
    assert sorted(found) == [("simplecil", "fair"), ("simplecil", "paper"), ("tosca", "paper")]
    tosca = found[("tosca", "paper")]
    assert tosca["protocol"] == {
        "name": "paper",
        "test_shuffle": False,
        "settings": {"selection": "batch", "augment_views": 2, "eval_batch_size": 48},
        "meanings": {s.key: s.meaning for s in Tosca.spec.protocol},
        "per_batch": True,
        "label": ["selection=batch", "ordered test", "batches of 48"],
    }
    assert tosca["config"]["protocol"] == "paper"
    assert tosca["config"]["method"]["init"] == "official"
    assert tosca["config"]["scenario"]["test_shuffle"] is False
    fair, paper = found[("simplecil", "fair")], found[("simplecil", "paper")]
    assert "protocol" not in fair["config"]  # a fair run keeps its pre-protocol file name
    assert results.config_hash(fair["config"]) != results.config_hash(paper["config"])
    # per-image prototypes: the test order moves no number
    assert (fair["avg_acc"], fair["last_acc"]) == (paper["avg_acc"], paper["last_acc"])
    for record in found.values():
        path = results.run_path(out, "synthetic", record["method"], 1993, record["config"])
        assert record_check.problems(record, path) == []

    lines = plan("run", *paper_args, "--dry-run")
    planned = {ln.split()[1]: ln.split() for ln in lines if ln.startswith("  done")}
    paths = {
        m: str(results.run_path(out, "synthetic", m, 1993, found[(m, "paper")]["config"]))
        for m in ("tosca", "simplecil")
    }
    assert {m: words[-1] for m, words in planned.items()} == paths
    assert lines[-1] == "2 runs planned: 2 done, 0 pending"

    runs = load_runs(out)[0]
    table = aggregate(runs, published_for=lambda method, scenario: (1.0, 2.0, "published"))
    pub = dict(zip(table["label"], table["pub_avg_acc"], strict=True))
    assert sorted(pub) == [
        "simplecil",
        "simplecil [paper] (ordered test)",
        "tosca [paper] (selection=batch, ordered test, batches of 48)",
    ]
    assert pub["simplecil [paper] (ordered test)"] == 1.0 and math.isnan(pub["simplecil"])


def test_record_check_reads_the_protocol_name(e2e_run):
    out, _, recs = e2e_run
    record = recs["tosca"]
    assert record["protocol"]["name"] == "fair"
    old = copy.deepcopy(record)
    del old["protocol"]["name"]  # records from before protocols were named: fair
    assert record_check.problems(old) == []
    bad = copy.deepcopy(record)
    bad["protocol"]["name"] = "oracle"
    assert record_check.problems(bad) == ["protocol.name is 'oracle', not one of fair, paper"]
    bad["protocol"]["name"] = "paper"
    assert record_check.problems(bad) == [
        "protocol.name is 'paper' but the config was run under 'fair'"
    ]


def test_dry_run_of_a_finished_grid_says_done(e2e_run, tmp_path):
    """The planned path is the one the run wrote (hash resolved without weights)."""
    out, _, recs = e2e_run
    lines = plan("run", "--out", str(out), *FAST, "--dry-run")
    assert lines[-1] == "2 runs planned: 2 done, 0 pending"
    copy_out = tmp_path / "copy"
    shutil.copytree(out, copy_out)
    planned = next(ln.split()[-1] for ln in lines if ln.split()[1:3] == ["tosca", "seed"])
    (copy_out / Path(planned).relative_to(out)).write_text("{}")  # other tests add results
    lines = plan("run", "--out", str(copy_out), *FAST, "--dry-run")
    assert lines[-1] == "2 runs planned: 1 done, 1 pending"
