"""Code that is not ours (a card's strategy module, an installed package's cards) cannot
take cl-bench down: one paragraph naming the card or package and the error, exit 2,
and the other cards and commands keep working."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from cl_bench.cards import catalogue, places, sources
from tests.helpers.cli import invoke, refused

SYN = ["--scenario", "synthetic", "--no-progress", "--precision", "fp32"]
EXAMPLES = places.ROOT / "examples"

# module body -> what the paragraph says (``{path}``: the module's file)
HOSTILE = {
    "raises": (
        "x = 1\nraise RuntimeError('boom at import')\n",
        "RuntimeError: boom at import (at {path} line 2)",
    ),
    "syntax": ("def broken(:\n    pass\n", "SyntaxError in {path} line 1: invalid syntax"),
    "exits": ("import sys\nsys.exit(3)\n", "it called sys.exit(3) (at {path} line 2)"),
    "exits-bare": ("raise SystemExit\n", "it called sys.exit(None) (at {path} line 1)"),
    "missing-dependency": (
        "import cl_bench_no_such_dependency\n",
        "ModuleNotFoundError: No module named 'cl_bench_no_such_dependency' (at {path} line 1)",
    ),
}


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    """Card folders go on sys.path, failed entry points are remembered: not past a test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sources, "_broken", {})
    monkeypatch.delenv("CL_BENCH_CARDS", raising=False)


def card_folder(tmp_path: Path, module: str, body: str) -> Path:
    """--cards folder: the example method (healthy), and card ``broken`` whose strategy
    module ``module`` holds ``body``."""
    cards = tmp_path / "cards"
    cards.mkdir()
    for name in ("my-method.yaml", "my_method.py"):
        (cards / name).write_text((EXAMPLES / name).read_text())
    raw = yaml.safe_load((EXAMPLES / "my-method.yaml").read_text())
    (cards / "broken.yaml").write_text(yaml.safe_dump({**raw, "strategy": f"{module}:Broken"}))
    (cards / f"{module}.py").write_text(body)
    return cards


@pytest.mark.parametrize("case", HOSTILE)
def test_broken_strategy_module_is_one_paragraph(case, tmp_path):
    module = f"hostile_{case.replace('-', '_')}"
    body, said = HOSTILE[case]
    cards = card_folder(tmp_path, module, body)
    paragraph = (
        f"{cards / 'broken.yaml'}: importing strategy {module}:Broken failed: "
        + said.format(path=cards / f"{module}.py")
    )
    out = tmp_path / "out"
    refused(
        invoke("run", "--cards", str(cards), "--methods", "broken", *SYN, "--out", str(out)),
        paragraph,
        out,
    )

    listed = invoke("list", "methods", "--cards", str(cards))
    assert listed.exit_code == 2, listed.output
    assert "Traceback" not in listed.output
    assert listed.stderr.startswith("error: ") and listed.stderr.count("\n") == 1
    assert paragraph in listed.stderr
    names = [ln.split()[0] for ln in listed.stdout.splitlines()]
    assert names == sorted([*catalogue.method_names(), "my-method"])  # all but the broken one

    planned = invoke(
        "run",
        "--cards",
        str(cards),
        "--methods",
        "my-method,simplecil",
        *SYN,
        "--out",
        str(out),
        "--dry-run",
    )
    assert planned.exit_code == 0, planned.output
    assert "2 runs planned: 0 done, 2 pending" in planned.stdout


def test_broken_card_outside_the_default_run_does_not_stop_it(tmp_path):
    cards = card_folder(tmp_path, "hostile_default", HOSTILE["raises"][0])
    planned = invoke(
        "run", "--cards", str(cards), *SYN, "--out", str(tmp_path / "out"), "--dry-run"
    )
    assert planned.exit_code == 0, planned.output
    planned_methods = {
        ln.split()[1] for ln in planned.stdout.splitlines() if ln.startswith("  pending ")
    }
    assert planned_methods == {"tosca", "simplecil"}


def install(tmp_path: Path, monkeypatch, package: str, body: str) -> Path:
    """An installed package (a dist-info on sys.path) whose card entry point ``cards``
    names the package, which holds a healthy card and whose ``__init__`` is ``body``."""
    site = tmp_path / "site"
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text(body)
    (site / package / "pkg-ncm.yaml").write_text(
        (catalogue.METHODS_DIR / "simplecil.yaml").read_text()
    )
    info = site / f"{package}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[cl_bench.cards]\ncards = {package}\n")
    monkeypatch.syspath_prepend(str(site))
    return site / package / "__init__.py"


@pytest.mark.parametrize("case", ["raises", "syntax", "exits"])
def test_broken_entry_point_package_costs_its_own_cards_only(case, tmp_path, monkeypatch):
    package = f"hostile_cards_{case}"
    body, said = HOSTILE[case]
    init = install(tmp_path, monkeypatch, package, body)
    paragraph = (
        f'The entry point "cards" ({package}) of group cl_bench.cards: importing it '
        f"failed: {said.format(path=init)}"
    )

    for what, known in (
        ("methods", catalogue.method_names()),
        ("scenarios", catalogue.scenario_names()),
    ):
        listed = invoke("list", what)
        assert listed.exit_code == 2, listed.output
        assert "Traceback" not in listed.output
        assert listed.stderr.startswith("error: ") and listed.stderr.count("\n") == 1
        assert paragraph in listed.stderr
        assert [ln.split()[0] for ln in listed.stdout.splitlines()] == known

    out = tmp_path / "out"
    planned = invoke("run", "--methods", "simplecil", *SYN, "--out", str(out), "--dry-run")
    assert planned.exit_code == 0, planned.output
    assert planned.stderr == (
        f"warning: {paragraph}. Fix or reinstall the package that "
        "declares it, or uninstall it. Its cards are left out.\n"
    )

    refused_run = invoke("run", "--methods", "pkg-ncm", *SYN, "--out", str(out))
    assert refused_run.exit_code == 2 and "Traceback" not in refused_run.output
    assert refused_run.stderr.splitlines()[-1].startswith('error: Unknown method "pkg-ncm".')
    assert f"Not read (the card may be there): {paragraph}" in refused_run.stderr
    assert not out.exists()


def test_entry_point_that_is_no_folder_is_left_out(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, "hostile_cards_path", "CARDS = '/nonexistent/cards'\n")
    info = next((tmp_path / "site").glob("*.dist-info"))
    (info / "entry_points.txt").write_text("[cl_bench.cards]\ncards = hostile_cards_path:CARDS\n")
    listed = invoke("list", "methods")
    assert listed.exit_code == 2
    assert (
        'error: The entry point "cards" (hostile_cards_path:CARDS) of group cl_bench.cards '
        "names /nonexistent/cards, which is not a folder of cards."
    ) in listed.stderr
    assert [ln.split()[0] for ln in listed.stdout.splitlines()] == catalogue.method_names()


def test_card_of_two_kinds_is_refused(tmp_path):
    cards = tmp_path / "cards"
    cards.mkdir()
    raw = yaml.safe_load((EXAMPLES / "my-method.yaml").read_text())
    (cards / "both.yaml").write_text(yaml.safe_dump({**raw, "dataset": "synthetic"}))
    for args in (
        ["list", "methods"],
        ["list", "scenarios"],
        ["run", "--methods", "both", *SYN, "--out", str(tmp_path / "out")],
    ):
        refused(
            invoke(*args, "--cards", str(cards)),
            f"{cards / 'both.yaml'} is two kinds of card at once: it has `strategy:` and "
            "`dataset:`. A card is a method",
            tmp_path / "out",
        )


MY_STRATEGY = '''from cl_bench.strategies.simplecil import SimpleCIL
from cl_bench.strategies.tosca import Tosca


class Sub(SimpleCIL):
    """A built-in strategy, subclassed: it reads that card's settings."""


class Declared(Tosca):
    required_settings = ("my_weight",)
'''


@pytest.mark.parametrize(
    ("strategy", "defaults", "lacks"),
    [
        (
            "cl_bench.strategies.simplecil:SimpleCIL",
            {"batch_size": 128},
            "eval_batch_size (read by SimpleCIL, as its card {methods}/simplecil.yaml says)",
        ),
        (
            "mine:Sub",
            {"eval_batch_size": 64},
            "batch_size (read by SimpleCIL, as its card {methods}/simplecil.yaml says)",
        ),
        (
            "mine:Declared",
            lambda tosca: tosca,
            "my_weight (declared in Declared.required_settings)",
        ),
        (
            "mine:Declared",
            lambda tosca: (
                {k: v for k, v in tosca.items() if k not in ("l1", "init")} | {"my_weight": 1.0}
            ),
            "l1, init (read by Tosca, as its card {methods}/tosca.yaml says). Add each to "
            "`defaults:`",
        ),
    ],
)
def test_card_lacking_settings_its_strategy_reads_is_refused_at_load(
    strategy, defaults, lacks, tmp_path
):
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "mine.py").write_text(MY_STRATEGY)
    tosca = yaml.safe_load((catalogue.METHODS_DIR / "tosca.yaml").read_text())
    raw = {
        "name": "short",
        "strategy": strategy,
        "inputs": "features",
        "backbones": "any",
        "defaults": defaults(tosca["defaults"]) if callable(defaults) else defaults,
    }
    (cards / "short.yaml").write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    refused(
        invoke("run", "--cards", str(cards), "--methods", "short", *SYN, "--out", str(out)),
        f"{cards / 'short.yaml'}: `defaults:` lacks settings its strategy reads: "
        + lacks.format(methods=catalogue.METHODS_DIR),
        out,
    )


def test_complete_card_of_a_builtin_strategy_loads(tmp_path):
    cards = tmp_path / "cards"
    cards.mkdir()
    raw = yaml.safe_load((catalogue.METHODS_DIR / "simplecil.yaml").read_text())
    (cards / "ncm-copy.yaml").write_text(
        yaml.safe_dump({**raw, "defaults": {**raw["defaults"], "extra": 1}})
    )
    listed = invoke("list", "methods", "--cards", str(cards))
    assert listed.exit_code == 0, listed.output
    assert any(ln.startswith("ncm-copy ") for ln in listed.stdout.splitlines())


HOOKS = """from cl_bench.contract import Inputs, MethodSpec, Schedule
from cl_bench.strategies.simplecil import SimpleCIL


class Picky(SimpleCIL):
    spec = MethodSpec(inputs=Inputs.FEATURES, trains_backbone=False,
                      schedule=Schedule.PER_TASK)

    @classmethod
    def check_params(cls, params, backbone):
        raise ValueError("picky about " + backbone.name)


def __getattr__(name):
    raise RuntimeError("no lazy " + name)


class Greedy(SimpleCIL):
    spec = MethodSpec(inputs=Inputs.FEATURES, trains_backbone=False,
                      schedule=Schedule.PER_TASK)

    @classmethod
    def memory(cls, params, work):
        return [params["mlp_ratio"]]
"""


GREEDY_LINE = '        return [params["mlp_ratio"]]'


def test_foreign_hooks_lazy_attributes_and_model_factories_are_contained(tmp_path):
    """Beyond the import: a hook that raises (at plan time, before anything is written), a
    module whose ``__getattr__`` raises for the class, a plain card's model factory module
    that raises at import."""
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "hooks.py").write_text(HOOKS)
    (cards / "factory.py").write_text("raise RuntimeError('factory needs a GPU')\n")
    for name in ("plain-avalanche.yaml", "plain_avalanche.py"):
        (cards / name).write_text((EXAMPLES / name).read_text())
    simplecil = yaml.safe_load((catalogue.METHODS_DIR / "simplecil.yaml").read_text())
    plain = yaml.safe_load((EXAMPLES / "plain-avalanche.yaml").read_text())
    cards_yaml = {
        "picky": {**simplecil, "strategy": "hooks:Picky"},
        "greedy": {**simplecil, "strategy": "hooks:Greedy"},
        "lazy": {**simplecil, "strategy": "hooks:Missing"},
        "factory": {**plain, "contract": {**plain["contract"], "model": "factory:make"}},
    }
    for name, raw in cards_yaml.items():
        (cards / f"{name}.yaml").write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    hooks = cards / "hooks.py"
    greedy_line = HOOKS.splitlines().index(GREEDY_LINE) + 1
    for method, needle in (
        (
            "picky",
            f"{cards / 'picky.yaml'}: the strategy's check_params failed: ValueError: "
            f"picky about efficientnet_lite0 (at {hooks} line 11). Fix that method "
            "of the strategy",
        ),
        (
            "greedy",
            f"{cards / 'greedy.yaml'}: the strategy's memory failed: KeyError: "
            f"'mlp_ratio' (at {hooks} line {greedy_line})",
        ),
        (
            "lazy",
            f"{cards / 'lazy.yaml'}: reading Missing of strategy module hooks failed: "
            f"RuntimeError: no lazy Missing (at {hooks} line 15)",
        ),
        (
            "factory",
            f"{cards / 'factory.yaml'}: importing the `contract:` model factory "
            "failed: RuntimeError: factory needs a GPU (at "
            f"{cards / 'factory.py'} line 1)",
        ),
    ):
        for dry in (["--dry-run"], []):
            refused(
                invoke(
                    "run", "--cards", str(cards), "--methods", method, *SYN, "--out", str(out), *dry
                ),
                needle,
                out,
            )
