"""Cards from outside the package (--cards, CL_BENCH_CARDS, entry points), the
example method, and the built wheel working from a folder outside the checkout."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from cl_bench.cards import catalogue
from cl_bench.cards.card import coerce
from cl_bench.cards.places import ROOT
from tests.helpers.cli import invoke, refused

EXAMPLES = ROOT / "examples"
SYN = ["--scenario", "synthetic", "--no-progress", "--precision", "fp32"]
# the example (Euclidean class means) on `synthetic`, seed 1993, offline EfficientNet-Lite0
MY_METHOD = {
    "avg_acc": 95.875,
    "last_acc": 95.0,
    "acc_matrix": [
        [100.0],
        [93.75, 100.0],
        [87.5, 100.0, 93.75],
        [87.5, 100.0, 93.75, 93.75],
        [87.5, 100.0, 93.75, 93.75, 100.0],
    ],
}


@pytest.fixture(autouse=True)
def own_sys_path(monkeypatch):
    """A card folder goes on sys.path for the rest of a process: not past one test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("CL_BENCH_CARDS", raising=False)


def records(out: Path) -> dict[str, dict]:
    return {
        json.loads(p.read_text())["method"]: json.loads(p.read_text())
        for p in sorted(out.glob("runs/*/*/*.json"))
    }


def test_example_method_runs_through_cards(tmp_path):
    """docs/own-method.md: the example method, as written there."""
    listed = invoke("list", "methods", "--cards", str(EXAMPLES))
    assert listed.exit_code == 0, listed.output
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith("my-method "))
    assert line.endswith(f"(--cards: {EXAMPLES / 'my-method.yaml'})")
    assert "(built-in)" in next(ln for ln in listed.stdout.splitlines() if ln.startswith("tosca"))

    result = invoke(
        "run", "--cards", f"{EXAMPLES}/", "--methods", "my-method", *SYN, "--out", str(tmp_path)
    )
    assert result.exit_code == 0, result.output
    record = records(tmp_path)["my-method"]
    assert {k: record[k] for k in MY_METHOD} == MY_METHOD
    assert record["accounting"]["stored_per_task"] == [2560, 5120, 7680, 10240, 12800]
    # the option counts for its command only
    assert "my-method" not in catalogue.method_names()


def test_cards_refused(tmp_path, monkeypatch):
    out = tmp_path / "out"
    refused(
        invoke(
            "run",
            "--cards",
            str(tmp_path / "none"),
            "--methods",
            "simplecil",
            *SYN,
            "--out",
            str(out),
        ),
        f"--cards {tmp_path / 'none'}: no such folder",
        out,
    )

    clash = tmp_path / "clash"
    clash.mkdir()
    shutil.copy(catalogue.METHODS_DIR / "simplecil.yaml", clash)
    refused(
        invoke("run", "--cards", str(clash), "--methods", "simplecil", *SYN, "--out", str(out)),
        f'Two method cards are named "simplecil": {catalogue.METHODS_DIR / "simplecil.yaml"}'
        f" (built-in) and {clash / 'simplecil.yaml'} (--cards)",
        out,
    )

    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.yaml").write_text("todo: write a method\n")
    refused(
        invoke("list", "methods", "--cards", str(stray)),
        f"{stray / 'notes.yaml'} is not a card: a method card has `strategy:`",
    )

    monkeypatch.setenv("CL_BENCH_CARDS", str(tmp_path / "gone"))
    refused(
        invoke("list", "scenarios"),
        f"CL_BENCH_CARDS names {tmp_path / 'gone'}, which is not a folder",
    )
    monkeypatch.delenv("CL_BENCH_CARDS")

    lost = tmp_path / "lost"
    lost.mkdir()
    (lost / "lost.yaml").write_text(
        (EXAMPLES / "my-method.yaml")
        .read_text()
        .replace("my_method:MyMethod", "lost_module:MyMethod")
    )
    refused(
        invoke("run", "--cards", str(lost), "--methods", "lost", *SYN, "--out", str(out)),
        "cannot be imported: no module named 'lost_module'. Fix `strategy:` in the card (a "
        "module is found among the installed packages, or beside a card from outside the "
        f"package: {lost / 'lost_module'}.py)",
        out,
    )


def test_suite_from_cards_has_its_baseline_beside_it(tmp_path):
    suite = tmp_path / "mine"
    suite.mkdir()
    (suite / "mini.yaml").write_text(
        "runs:\n  - {name: a, scenario: synthetic, methods: [my-method]}\n"
    )
    out = tmp_path / "out"
    refused(
        invoke("check", "--suite", "mini", "--cards", f"{suite},{EXAMPLES}", "--out", str(out)),
        f"Baseline {suite / 'baselines' / 'mini.json'} does not exist",
        out,
    )


DIST_INFO = {
    "METADATA": "Metadata-Version: 2.1\nName: demo-cards\nVersion: 0.1\n",
    "entry_points.txt": "[cl_bench.cards]\ndemo = demo_cards\ndemo-path = demo_cards.more:CARDS\n",
}


@pytest.fixture
def installed_cards(tmp_path, monkeypatch) -> Path:
    """An installed package (a dist-info on sys.path) that declares two card entry
    points: its package folder, and a path object in one of its modules."""
    site = tmp_path / "site"
    pkg = site / "demo_cards"
    (pkg / "extra").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "more.py").write_text(
        "from pathlib import Path\n\nCARDS = Path(__file__).parent / 'extra'\n"
    )
    (pkg / "demo-ncm.yaml").write_text((catalogue.METHODS_DIR / "simplecil.yaml").read_text())
    (pkg / "extra" / "tiny.yaml").write_text(
        (catalogue.BENCHMARKS_DIR / "synthetic.yaml").read_text()
    )
    info = site / "demo_cards-0.1.dist-info"
    info.mkdir()
    for name, text in DIST_INFO.items():
        (info / name).write_text(text)
    monkeypatch.syspath_prepend(str(site))
    return pkg


def test_entry_point_and_env_cards_are_listed_with_their_origin(
    installed_cards, tmp_path, monkeypatch
):
    env = tmp_path / "env"
    env.mkdir()
    (env / "env-ncm.yaml").write_text((catalogue.METHODS_DIR / "simplecil.yaml").read_text())
    monkeypatch.setenv("CL_BENCH_CARDS", f"{env}{os.pathsep}{env}")  # twice counts once
    methods = invoke("list", "methods")
    assert methods.exit_code == 0, methods.output
    origin = {ln.split()[0]: ln.rsplit("  (", 1)[1] for ln in methods.stdout.splitlines()}
    assert origin["demo-ncm"] == f"entry point demo: {installed_cards / 'demo-ncm.yaml'})"
    assert origin["env-ncm"] == f"CL_BENCH_CARDS: {env / 'env-ncm.yaml'})"
    assert origin["simplecil"] == "built-in)"
    scenarios = invoke("list", "scenarios").stdout.splitlines()
    assert (
        f"{'tiny':17s} Synthetic colour patterns (for tests)  [init 2, +2]  "
        f"(entry point demo-path: {installed_cards / 'extra' / 'tiny.yaml'})"
    ) in scenarios

    (env / "demo-ncm.yaml").write_text((catalogue.METHODS_DIR / "simplecil.yaml").read_text())
    refused(
        invoke("list", "methods"),
        f'Two method cards are named "demo-ncm": {installed_cards / "demo-ncm.yaml"} '
        f"(entry point demo) and {env / 'demo-ncm.yaml'} (CL_BENCH_CARDS)",
    )


WHEEL_SOURCES = [
    "pyproject.toml",
    "setup.py",
    "README.md",
    "cl_bench",
    "methods",
    "benchmarks",
    "results/baselines",
]
NO_WHEEL = (
    None
    if importlib.util.find_spec("setuptools") and importlib.util.find_spec("pip")
    else "building the wheel needs setuptools and pip in the test environment"
)


@pytest.mark.skipif(NO_WHEEL is not None, reason=NO_WHEEL or "")
def test_wheel_works_outside_the_checkout(tmp_path):
    """`pip install <wheel>` into a fresh environment: cards, baseline and a run from a
    folder that is not a checkout. The dependencies come from the test environment's
    site-packages (offline), never its cl_bench."""
    src = tmp_path / "src"
    for name in WHEEL_SOURCES:  # a copy: no stale build/ of the checkout in the wheel
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [
            *pip,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next((tmp_path / "dist").glob("cl_bench-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [
            *pip,
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    purelib = Path(
        subprocess.run(
            [
                venv / "bin" / "python",
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # a plain path line: the test environment's own .pth files (an editable cl_bench) stay out
    (purelib / "test-env.pth").write_text(
        "\n".join(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))) + "\n"
    )
    home = tmp_path / "elsewhere"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CL_BENCH_CARDS")}
    env["CL_BENCH_CACHE"] = str(tmp_path / "cache")  # features of its own, not the tests'

    def cl_bench(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [venv / "bin" / "cl-bench", *args],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    listed = cl_bench("list", "methods")
    assert listed.returncode == 0, listed.stderr
    assert [ln.split()[0] for ln in listed.stdout.splitlines()] == catalogue.method_names()
    assert all(ln.endswith("(built-in)") for ln in listed.stdout.splitlines())

    ran = cl_bench("run", "--methods", "simplecil,my-method", "--cards", str(EXAMPLES), *SYN)
    assert ran.returncode == 0, ran.stderr
    wheel_runs = records(home / "results")  # ./results of the caller
    here = invoke("run", "--methods", "simplecil", *SYN, "--out", str(tmp_path / "here"))
    assert here.exit_code == 0, here.output
    ours = records(tmp_path / "here")["simplecil"]
    for method, expected in (("simplecil", ours), ("my-method", MY_METHOD)):
        assert {k: wheel_runs[method][k] for k in MY_METHOD} == {k: expected[k] for k in MY_METHOD}
    assert wheel_runs["simplecil"]["config"] == ours["config"]
    assert wheel_runs["simplecil"]["env"]["git"] is None  # not a checkout

    probe = subprocess.run(
        [
            venv / "bin" / "python",
            "-c",
            "from cl_bench.cards import places\n"
            "from cl_bench.gate import baseline as gate_baseline\n"
            "from cl_bench.gate import suite as gate_suite\n"
            "path = gate_baseline.default_baseline('ci', writing=False)\n"
            "gate_baseline.read_baseline(path, gate_suite.load_suite('ci'))\n"
            "print(places.CHECKOUT, path)",
        ],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout == f"None {purelib / 'cl_bench' / '_cards' / 'baselines' / 'ci.json'}\n"
    write = cl_bench("check", "--update-baseline")
    assert write.returncode == 2 and "is part of the installed cl-bench" in write.stderr
    assert not (home / "results" / "ci").exists()


def test_set_accepts_scientific_floats():
    # YAML 1.1 (PyYAML) reads 1e-4 without a dot as a string; --set must still take it
    assert coerce("1e-4", 0.025, "ease.lr") == pytest.approx(1e-4)
    assert coerce("5E3", 0.5, "x.y") == 5000.0
    assert coerce("0.1", 0.025, "ease.lr") == 0.1
    for bad in ("fast", "inf", "nan"):
        with pytest.raises(Exception, match="expected a float"):
            coerce(bad, 0.025, "ease.lr")
    assert coerce("1e-4", "x", "a.b") == "1e-4"  # a string setting keeps the text
