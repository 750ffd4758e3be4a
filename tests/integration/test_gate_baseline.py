"""`cl-bench check` checks its own baseline before the suite runs: every value a finite
number (not a bool, string, NaN or Infinity), every tolerance a finite number >= 0, in
the file and on the command line; and the suite's entries when it loads. Each case is
refused in seconds: exit 2, one paragraph, nothing run or written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cl_bench.cards.places import ROOT
from cl_bench.gate import baseline as gate_baseline
from cl_bench.gate import compare as gate_compare
from cl_bench.gate.suite_entries import check_entries
from tests.helpers.cli import invoke, refused

KEY = "synthetic-prompts/l2p"


def ci_baseline() -> dict:
    return json.loads((ROOT / "results" / "baselines" / "ci.json").read_text())


def check_with(tmp_path: Path, base: dict | str, *args: str):
    """`cl-bench check --suite ci` against ``base`` (a mapping, or raw JSON text)."""
    path = tmp_path / "base.json"
    path.write_text(base if isinstance(base, str) else json.dumps(base))
    return invoke(
        "check",
        "--suite",
        "ci",
        "--baseline",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--no-progress",
        *args,
    )


def edited(metric: str = "avg_acc", key: str = KEY, **fields: object) -> dict:
    base = ci_baseline()
    base["metrics"].setdefault(key, {}).setdefault(metric, {}).update(fields)
    return base


@pytest.mark.parametrize(
    ("base", "needle"),
    [
        (edited(value=float("nan")), f"{KEY} avg_acc value NaN"),
        (edited(value=True), f"{KEY} avg_acc value true"),
        (edited("last_acc", value="40.5"), f'{KEY} last_acc value "40.5"'),
        (edited(value=float("inf")), f"{KEY} avg_acc value Infinity"),
        (edited(tolerance=float("inf")), f"{KEY} avg_acc tolerance Infinity"),
        (edited(tolerance=float("nan")), f"{KEY} avg_acc tolerance NaN"),
        (edited(tolerance=-1), f"{KEY} avg_acc tolerance -1"),
        (edited(tolerance="1.0"), f'{KEY} avg_acc tolerance "1.0"'),
        (edited(tolerance=False), f"{KEY} avg_acc tolerance false"),
        (edited(by_cpu={"AVX2": float("nan")}), f"{KEY} avg_acc by_cpu AVX2 NaN"),
        (edited(by_cpu=[25.3]), f"{KEY} avg_acc by_cpu [25.3]"),
        # a key the suite no longer runs is still compared (as MISSING), so it is checked too
        (edited(key="old/tosca", value=None), "old/tosca avg_acc value null"),
        (
            {**ci_baseline(), "metrics": {**ci_baseline()["metrics"], "old/tosca": [1, 2]}},
            "old/tosca [1, 2] (not a mapping of metrics)",
        ),
    ],
)
def test_unusable_baseline_numbers_are_refused_before_the_suite(tmp_path, base, needle):
    result = check_with(tmp_path, base)
    refused(result, needle, tmp_path / "out")
    assert "must be a finite number" in result.stderr


def test_a_number_beyond_floats_is_refused(tmp_path):
    """JSON's 1e999 reads as Infinity: refused like a written Infinity."""
    text = json.dumps(edited(value=12345.0)).replace("12345.0", "1e999")
    refused(check_with(tmp_path, text), f"{KEY} avg_acc value Infinity", tmp_path / "out")


@pytest.mark.parametrize("tolerance", ["-1", "-0.01", "inf", "-inf", "nan"])
@pytest.mark.parametrize("update", [False, True])
def test_command_line_tolerance_must_be_finite_and_not_negative(tmp_path, tolerance, update):
    result = check_with(
        tmp_path,
        ci_baseline(),
        "--tolerance",
        tolerance,
        *(["--update-baseline"] if update else []),
    )
    refused(
        result,
        f"--tolerance {float(tolerance)}: a tolerance is the accuracy points",
        tmp_path / "out",
    )
    assert json.loads((tmp_path / "base.json").read_text()) == ci_baseline()  # not rewritten


def test_unreadable_baseline_paths(tmp_path):
    folder = tmp_path / "folder.json"
    folder.mkdir()
    refused(
        invoke("check", "--suite", "ci", "--baseline", str(folder), "--out", str(tmp_path / "out")),
        f"Baseline {folder} cannot be read (Is a directory)",
        tmp_path / "out",
    )
    long = tmp_path / ("b" * 300 + ".json")
    refused(
        invoke("check", "--suite", "ci", "--baseline", str(long), "--out", str(tmp_path / "out")),
        "cannot be read (File name too long)",
        tmp_path / "out",
    )


def test_good_numbers_pass_and_compare_as_before():
    """Integers, 0 and fractional tolerances are numbers; the committed baseline is good."""
    base = ci_baseline()
    assert gate_baseline.number_problems(base["metrics"]) == []
    base["metrics"][KEY]["avg_acc"].update(value=50, tolerance=0)
    assert gate_baseline.number_problems(base["metrics"]) == []
    gate_baseline.check_tolerance(0.0)
    gate_baseline.check_tolerance(2.5)
    rows = gate_compare.compare(base, {KEY: {"avg_acc": 49.99, "last_acc": 1.0}}, None, cpu="AVX2")
    assert [(r.metric, r.baseline, r.tolerance, r.status) for r in rows if r.key == KEY] == [
        ("avg_acc", 50, 0, "DROP"),
        ("last_acc", base["metrics"][KEY]["last_acc"]["value"], 1.0, "DROP"),
    ]


@pytest.mark.parametrize(
    ("runs", "needle"),
    [
        ("[5]", "every entry of runs: needs a name and methods (entry 1 is 5)"),
        (
            "[{name: a, methods: [simplecil], seed: [1994]}]",
            "entry 1 of runs: ('a') has the unknown key 'seed'. Did you mean \"seeds\"?",
        ),
        (
            "[{name: a, methods: [simplecil], image_size: '64'}]",
            "entry 1 of runs: ('a'): image_size='64' (str): image_size must be an integer or None",
        ),
        ("[{name: a, methods: [simplecil], seeds: [1.5]}]", "seeds must be integers"),
        (
            "[{name: a, methods: [simplecil], sets: tosca.epochs=2}]",
            "sets must be a list of strings",
        ),
        ("[{name: a, methods: []}]", "names no method"),
        (
            "[{name: a, methods: [simplecil]}, {name: a, methods: [tosca]}]",
            "entry 2 of runs: ('a'): another entry has the same name",
        ),
    ],
)
def test_suite_entries_are_checked_when_the_suite_loads(tmp_path, runs, needle):
    """Before, each of these was a traceback (or a silent misreading) once the suite ran."""
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "mine.yaml").write_text(f"name: mine\nruns: {runs}\n")
    out = tmp_path / "out"
    refused(
        invoke(
            "check",
            "--cards",
            str(cards),
            "--suite",
            "mine",
            "--update-baseline",
            "--baseline",
            str(tmp_path / "b.json"),
            "--out",
            str(out),
        ),
        needle,
        out,
    )
    assert not (tmp_path / "b.json").exists()


def test_a_single_method_or_seed_in_a_suite_entry_is_a_list_of_one():
    suite = {"runs": [{"name": "a", "methods": "simplecil, tosca", "seeds": 1994}]}
    check_entries(Path("s.yaml"), suite)
    assert suite["runs"][0]["methods"] == ["simplecil", "tosca"]
    assert suite["runs"][0]["seeds"] == [1994]


def test_update_baseline_into_a_folder_is_refused_before_the_suite(tmp_path):
    out = tmp_path / "out"
    refused(
        invoke(
            "check",
            "--suite",
            "ci",
            "--update-baseline",
            "--baseline",
            str(tmp_path),
            "--out",
            str(out),
        ),
        f"--baseline {tmp_path} is a folder; give the file to write, e.g. --baseline "
        f"{tmp_path / 'ci.json'}",
        out,
    )
