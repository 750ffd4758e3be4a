"""`cl-bench report`'s paired statistics end to end: three methods x five seeds run on
`synthetic` and reported (differences, intervals and marks in every format, equal to
SciPy's on the runs' own numbers), and hand-made results on two scenarios (ranks, the
Friedman test, the critical-difference diagram, an upper bound, --against)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from tests.helpers.cli import SYNTHETIC, invoke, refused
from tests.integration.test_report import PNG_MAGIC, fake_run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SEEDS = ["1", "2", "3", "4", "5"]


@pytest.fixture(scope="module")
def five_seeds(tmp_path_factory) -> Path:
    """SimpleCIL, the example nearest-class-mean method and TOSCA (1 epoch), 5 seeds."""
    out = tmp_path_factory.mktemp("five_seeds")
    run = invoke(
        "run",
        "--out",
        str(out / "results"),
        "--cards",
        str(EXAMPLES),
        *SYNTHETIC,
        "--methods",
        "simplecil,my-method,tosca",
        "--seeds",
        ",".join(SEEDS),
        "--set",
        "tosca.epochs=1",
    )
    assert run.exit_code == 0, run.output
    report = invoke(
        "report",
        "--cards",
        str(EXAMPLES),
        "--results",
        str(out / "results"),
        "--out",
        str(out / "report"),
        "--images",
        "none",
    )
    assert report.exit_code == 0, report.output
    return out / "report"


def _md_rows(md: str) -> tuple[list[str], dict[str, list[str]]]:
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    split = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines]
    return split[0], {row[0]: row for row in split[1:]}


def _signed(value: float) -> str:
    return f"{round(value, 2) + 0.0:.2f}".replace("-", "−")


def test_differences_intervals_and_marks_equal_scipys(five_seeds):
    runs = pd.read_csv(five_seeds / "runs.csv")
    acc = runs[runs["metric"] == "avg_acc"].pivot(index="seed", columns="label", values="value")
    assert sorted(acc.index) == [1, 2, 3, 4, 5] and acc.shape[1] == 3
    reference = acc.mean().idxmax()
    header, rows = _md_rows((five_seeds / "report.md").read_text())
    column = header.index(f"Δ avg acc vs {reference}")
    assert header[column - 1] == "avg acc (%)"
    assert rows[reference][column] == "reference"
    paired = pd.read_csv(five_seeds / "paired.csv")
    marks = {}
    for label in acc.columns.drop(reference):
        test = stats.ttest_rel(acc[label], acc[reference])
        low, high = test.confidence_interval(0.95)
        mean = (acc[label] - acc[reference]).mean()
        mark = " *" if test.pvalue < 0.05 else ""
        assert rows[label][column] == f"{_signed(mean)} [{_signed(low)}, {_signed(high)}]{mark}"
        marks[label] = mark
        row = paired[(paired["label"] == label) & (paired["metric"] == "avg_acc")].iloc[0]
        assert row["n"] == 5 and row["reference"] == reference
        assert row["difference"] == pytest.approx(mean, abs=1e-12)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), abs=1e-12)
        assert row["p"] == pytest.approx(test.pvalue, abs=1e-12)
    # one epoch of TOSCA is far below the nearest-mean methods on every seed
    assert marks["tosca (selection=sample)"] == " *"
    # bold average accuracy only where the best is significantly ahead of the runner-up
    best, runner = acc.mean().sort_values(ascending=False).index[:2]
    ahead = stats.ttest_rel(acc[best], acc[runner]).pvalue < 0.05
    shown = rows[best][column - 1]
    assert shown.startswith("**") == ahead
    assert not any(rows[label][column - 1].startswith("**") for label in acc.columns.drop(best))


def test_every_format_shows_the_comparison(five_seeds):
    md = (five_seeds / "report.md").read_text()
    tex = (five_seeds / "report.tex").read_text()
    html = (five_seeds / "report.html").read_text()
    assert "n/a: fewer than 2 shared seeds" in md and "n/a: fewer than 2 shared seeds" in html
    assert "paired t-test" in tex
    assert re.search(r"\$\\Delta\$ avg acc vs [a-z]", tex)
    assert re.search(r"\$-\$\d+\.\d\d \[\$-\$\d+\.\d\d, \$-\$\d+\.\d\d\] \*", tex)
    assert re.search(r"<td>−\d+\.\d\d \[−\d+\.\d\d, −\d+\.\d\d\] \*</td>", html)
    assert "this report has 1 scenario(s) and 3 such method(s)" in md
    assert not (five_seeds / "ranks.csv").exists()


@pytest.fixture(scope="module")
def two_scenarios(tmp_path_factory) -> Path:
    """TOSCA, SimpleCIL and a third method on two scenarios, 3 seeds, and Joint on one."""
    out = tmp_path_factory.mktemp("two_scenarios")
    accs = {
        "cifar100": {"tosca": 90.0, "simplecil": 85.0, "ranpac": 80.0},
        "imagenet-r": {"tosca": 70.0, "simplecil": 75.0, "ranpac": 60.0},
    }
    for scenario, by_method in accs.items():
        for seed in (1993, 1994, 1995):
            for i, (method, acc) in enumerate(by_method.items()):
                shift = (seed - 1994) * (i + 1)  # a spread that differs between methods
                fake_run(
                    out,
                    method=method,
                    scenario=scenario,
                    seed=seed,
                    selection="sample" if method == "tosca" else None,
                    acc_seen=(acc + shift + 5, acc + shift, acc + shift - 5),
                )
    for seed in (1993, 1994, 1995):
        fake_run(out, method="joint", seed=seed, selection=None, acc_seen=(96.0, 96.0, 96.0))
    return out


def test_ranks_friedman_and_diagram_across_scenarios(two_scenarios, tmp_path):
    report = tmp_path / "report"
    result = invoke(
        "report", "--results", str(two_scenarios), "--out", str(report), "--against", "ranpac"
    )
    assert result.exit_code == 0, result.output
    md = (report / "report.md").read_text()
    across = md.split("## all scenarios")[1].split("## Protocols and columns")[0]
    header, rows = _md_rows(across)
    assert header == ["method", "avg acc rank", "last acc rank", "forgetting rank"]
    # avg acc ranks: cifar100 tosca 1, simplecil 2, ranpac 3; imagenet-r 2, 1, 3
    assert {label: row[1] for label, row in rows.items()} == {
        "tosca (selection=sample)": "1.50",
        "simplecil": "1.50",
        "ranpac": "3.00",
    }
    # 12 / (N k (k+1)) * (3^2 + 3^2 + 6^2) - 3 N (k+1) = 0.5 * 54 - 24
    p = stats.chi2.sf(3.0, 2)
    assert f"avg acc χ² = 3.00, p = {p:.3f}" in across
    assert "CD = 2.34" in across  # q_0.05(k=3) / sqrt(2) * sqrt(3 * 4 / 12)
    for fmt in ("png", "svg"):
        assert (report / f"critical-difference-avg-acc.{fmt}").is_file()
    assert (report / "critical-difference-avg-acc.png").read_bytes().startswith(PNG_MAGIC)
    assert "![Critical difference, avg acc](critical-difference-avg-acc.png)" in across
    html = (report / "report.html").read_text()
    assert 'alt="Critical difference, avg acc"' in html and "<h2>all scenarios</h2>" in html
    ranks = pd.read_csv(report / "ranks.csv", index_col="label")
    assert ranks.loc["ranpac", "avg_acc"] == 3.0 and "joint" not in ranks.index
    # the upper bound: last, marked, compared with the reference, never bold
    cifar = md.split("## cifar100")[1].split("## imagenet-r")[0]
    header, rows = _md_rows(cifar)
    assert list(rows)[-1] == "joint [upper bound]"
    assert header[3] == "Δ avg acc vs ranpac"
    assert rows["ranpac"][3] == "reference"
    assert not any(cell.startswith("**") for cell in rows["joint [upper bound]"])


def test_against_an_unknown_name_is_refused(two_scenarios, tmp_path):
    result = invoke(
        "report", "--results", str(two_scenarios), "--out", str(tmp_path), "--against", "ranpack"
    )
    refused(result, 'no row of the report is "ranpack". Did you mean "ranpac"?')
