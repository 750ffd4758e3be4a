"""A result is reused only for the same experiment: the same data (its identity in the
config, so in the file name), the same code (the digests of the source files the run
executes; another digest makes the result stale) and the same package versions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cl_bench import source_identity
from cl_bench.engine.checkpoint import RunCheckpoint
from cl_bench.scenarios.folders import imagefolder
from cl_bench.source_identity import MISSING, changes, closure, code_block, file_digest, label
from cl_bench.store import results
from cl_bench.store.record_check import problems
from cl_bench.store.staleness import NO_IDENTITY, stale_reasons
from cl_bench.strategies.simplecil import SimpleCIL
from tests.helpers.cli import TREE, invoke
from tests.helpers.paths import REPO
from tests.helpers.trees import image_tree, make_tree

MODULE = '''"""A module."""

import math


def f(x):
    """Square it."""
    return x * x  # the square
'''


def test_a_files_digest_ignores_docstrings_comments_and_layout(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(MODULE)
    before = file_digest(path)
    path.write_text(
        MODULE.replace('"""Square it."""', '"""Another docstring."""')
        .replace("# the square", "# another comment")
        .replace("return x * x", "return x*x\n\n")
    )
    assert file_digest(path) == before
    path.write_text(MODULE.replace("x * x", "-x * x"))
    assert file_digest(path) not in (before, MISSING)
    path.unlink()
    assert file_digest(path) == MISSING


def test_a_methods_code_is_the_runner_its_strategy_and_their_imports():
    names = set(code_block(SimpleCIL)["modules"])
    assert {
        "cl_bench/engine/runner.py",
        "cl_bench/strategies/simplecil.py",
        "cl_bench/strategies/blocks/heads.py",
        "cl_bench/store/results.py",
        "cl_bench/__init__.py",
        "cl_bench/engine/__init__.py",
    } <= names
    # neither other methods nor the layers that only read results
    assert not {"cl_bench/strategies/tosca.py", "cl_bench/strategies/l2p.py"} & names
    assert not [
        n
        for n in names
        if n.startswith(("cl_bench/reporting/", "cl_bench/commands/")) or n == "cl_bench/api.py"
    ]


def test_a_method_beside_its_card_brings_its_own_imports(tmp_path, monkeypatch):
    (tmp_path / "helper_mod.py").write_text("SCALE = 2\n")
    (tmp_path / "plug_mod.py").write_text(
        "from helper_mod import SCALE\nfrom cl_bench.strategies.simplecil import SimpleCIL\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    source_identity._top_folder.cache_clear()
    files = set(closure([tmp_path / "plug_mod.py"]))
    assert {
        (tmp_path / "helper_mod.py").resolve(),
        source_identity.PACKAGE_DIR / "strategies" / "simplecil.py",
    } <= files
    modules = {label(f): file_digest(f) for f in files}
    assert label(tmp_path / "helper_mod.py") == str((tmp_path / "helper_mod.py").resolve())
    assert changes(modules) == []
    (tmp_path / "helper_mod.py").write_text("SCALE = 3\n")
    assert changes(modules) == [f"{label(tmp_path / 'helper_mod.py')} (edited)"]


def record_of(modules: dict, packages: dict | None = None) -> dict:
    return {
        "code": {"digest": source_identity.digest_of(modules), "modules": modules},
        "env": {"packages": packages} if packages is not None else {},
    }


def test_stale_reasons_name_what_changed(tmp_path, monkeypatch):
    path = tmp_path / "m.py"
    path.write_text(MODULE)
    modules = {str(path): file_digest(path)}
    assert stale_reasons(record_of(modules)) == []
    assert stale_reasons({"env": {}}) == [NO_IDENTITY]
    monkeypatch.setattr(
        "cl_bench.store.staleness.dependency_versions",
        lambda: {"torch": "2.14.1", "numpy": "2.3.0"},
    )
    assert stale_reasons(
        record_of(modules, {"torch": "2.14.1", "numpy": "2.2.0", "gone": "1"})
    ) == ["packages changed: numpy 2.2.0 -> 2.3.0"]
    path.write_text(MODULE.replace("x * x", "x + x"))
    assert stale_reasons(record_of(modules)) == [f"code changed: {path} (edited)"]
    path.unlink()
    assert stale_reasons(record_of(modules)) == [f"code changed: {path} (missing)"]


@pytest.mark.parametrize(
    "code, why",
    [
        ("abc", "code is str, not an object"),
        ({"digest": 3, "modules": {"a.py": "x"}}, "code.digest is 3, not a text"),
        ({"digest": "d", "modules": {}}, "code.modules is not a map of source file names"),
        ({"digest": "d", "modules": {"a.py": 1}}, "code.modules is not a map of source file names"),
    ],
)
def test_a_records_code_is_type_checked(code, why, e2e_run):
    _, _, recs = e2e_run
    found = problems({**recs["simplecil"], "code": code})
    assert any(why in p for p in found), found


def test_a_checkpoint_of_other_code_is_not_resumed(tmp_path, capsys, monkeypatch):
    result = tmp_path / "1993-abc.json"
    key = {"method": "m", "seed": 1993, "tasks": 3}
    old = RunCheckpoint(result, {**key, "code": "old"})
    old.path.write_bytes(b"saved")  # what read() returns stands for its contents
    monkeypatch.setattr(
        "cl_bench.engine.checkpoint.read",
        lambda path: {"key": old.key, "done": 1, "elapsed_s": 1.0},
    )
    assert RunCheckpoint(result, {**key, "code": "old"})._load()["done"] == 1
    assert RunCheckpoint(result, {**key, "code": "new"})._load() is None
    assert "it was made by other code (code old, now new)" in capsys.readouterr().err
    assert not old.path.exists()


# ------------------------------------------------------------------ data


def test_the_data_identity_follows_the_files_not_where_they_lie(tmp_path):
    a = image_tree(tmp_path / "a")
    copy = tmp_path / "copy"
    shutil.copytree(a, copy)  # copies keep modification times
    other = make_tree(tmp_path / "b", ["a", "b"])
    renamed = tmp_path / "r"
    shutil.copytree(a, renamed)
    for split in ("train", "test"):
        (renamed / split / "b").rename(renamed / split / "c")

    def ident(root: Path) -> str:
        return imagefolder(root).identity

    assert ident(a) == ident(copy)
    assert len({ident(a), ident(other), ident(renamed)}) == 3


def test_another_data_root_is_another_result(tmp_path):
    a = image_tree(tmp_path / "a")
    b = make_tree(tmp_path / "b", ["a", "b"])
    out = tmp_path / "res"
    first = invoke("run", "--out", str(out), "--data-root", str(a), *TREE)
    assert first.exit_code == 0, first.output
    plan = invoke("run", "--out", str(out), "--data-root", str(b), "--dry-run", *TREE)
    assert plan.exit_code == 0, plan.output
    assert "0 done, 1 pending" in plan.output
    second = invoke("run", "--out", str(out), "--data-root", str(b), *TREE)
    assert second.exit_code == 0, second.output
    assert "skip" not in second.output
    files = sorted(out.glob("runs/imagefolder/simplecil/*.json"))
    assert len(files) == 2
    recs = [json.loads(f.read_text()) for f in files]
    assert recs[0]["config"]["data"] != recs[1]["config"]["data"]
    again = invoke("run", "--out", str(out), "--data-root", str(a), *TREE)
    assert "skip simplecil seed 1993: finished" in again.output, again.output


# ------------------------------------------------------------------ code

SUITE = {
    "name": "mini",
    "runs": [
        {
            "name": "syn",
            "scenario": "synthetic",
            "precision": "fp32",
            "image_size": 32,
            "methods": ["my-method"],
            "sets": ["scenario.dataset_args={train_per_class: 6, test_per_class: 3}"],
        }
    ],
}
SIGN = "return -(torch.cdist(f.float(), self.mu) ** 2)"


def cli(*args: str) -> subprocess.CompletedProcess:
    """``cl-bench ...`` in a fresh process, as a user runs it after editing code."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    return subprocess.run(
        [sys.executable, "-m", "cl_bench", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


def test_an_edited_method_is_recomputed_and_check_catches_it(tmp_path):
    cards = tmp_path / "cards"
    cards.mkdir()
    shutil.copy(REPO / "examples" / "my-method.yaml", cards)
    module = cards / "my_method.py"
    shutil.copy(REPO / "examples" / "my_method.py", module)
    (cards / "mini.yaml").write_text(json.dumps(SUITE))
    gate = [
        "check",
        "--cards",
        str(cards),
        "--suite",
        "mini",
        "--baseline",
        str(tmp_path / "base.json"),
        "--out",
        str(tmp_path / "res"),
        "--no-progress",
    ]
    made = cli(*gate, "--update-baseline")
    assert made.returncode == 0, made.stdout + made.stderr
    source = module.read_text()
    assert SIGN in source

    module.write_text(
        source.replace("nearest class mean", "the nearest class mean").replace("# every", "# each")
    )
    kept = cli(*gate)  # a docstring edit keeps the result
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "skip my-method seed 1993: finished" in kept.stdout

    module.write_text(source.replace(SIGN, SIGN.replace("-(torch", "(torch")))
    caught = cli(*gate)
    assert caught.returncode == 1, caught.stdout + caught.stderr
    assert (
        f"stale my-method seed 1993: code changed: {module.resolve()} (edited); computing it again"
    ) in caught.stdout
    assert "DROP" in caught.stdout

    module.write_text(source)  # back to the code of the baseline: the result is stale again
    status = cli("status", "--results", str(tmp_path / "res"))
    assert status.returncode == 0, status.stdout + status.stderr
    assert "stale" in status.stdout and f"{module.resolve()} (edited)" in status.stdout
    report = cli(
        "report",
        "--results",
        str(tmp_path / "res"),
        "--out",
        str(tmp_path / "rep"),
        "--cards",
        str(cards),
        "--format",
        "csv",
        "--images",
        "none",
    )
    assert report.returncode == 2 and "are stale" in report.stderr, report.stderr
    assert not (tmp_path / "rep").exists()
    marked = cli(
        "report",
        "--results",
        str(tmp_path / "res"),
        "--out",
        str(tmp_path / "rep"),
        "--cards",
        str(cards),
        "--format",
        "md",
        "--images",
        "none",
        "--allow-stale",
    )
    assert marked.returncode == 0, marked.stderr
    assert "my-method [stale]" in (tmp_path / "rep" / "report.md").read_text()
    back = cli(*gate)
    assert back.returncode == 0 and "check passed" in back.stdout, back.stdout + back.stderr


def test_a_result_written_before_code_identities_is_stale(e2e_run, tmp_path):
    out, _, recs = e2e_run
    [path] = (out / "runs" / "synthetic" / "simplecil").glob("*.json")
    copy = tmp_path / path.relative_to(out)
    copy.parent.mkdir(parents=True)
    record = dict(recs["simplecil"])
    del record["code"]
    copy.write_text(json.dumps(record))
    there = results.found(copy)
    assert (there.state, there.why) == ("stale", (NO_IDENTITY,))
    assert not results.is_done(copy)
    assert results.found(path).state == "done"


def test_an_installed_cl_bench_is_still_its_own_code(monkeypatch):
    """From a wheel, cl-bench's files lie among the installed packages: they are still
    the run's code (other installed packages are identified by their versions)."""
    monkeypatch.setattr(source_identity, "_installed_roots", lambda: (str(source_identity.ROOT),))
    names = set(code_block(SimpleCIL)["modules"])
    assert {"cl_bench/strategies/simplecil.py", "cl_bench/engine/runner.py"} <= names


def test_packages_of_another_environment_on_the_path_are_not_the_runs_code(monkeypatch):
    """torch found through a path line to another environment's site-packages (as a venv
    that borrows packages has it) is an installed package, never read as source."""
    import torch

    monkeypatch.setattr(source_identity, "_installed_roots", lambda: ())
    assert source_identity._is_installed(Path(torch.__file__).resolve())
    assert not source_identity._is_installed(REPO / "examples" / "my_method.py")
