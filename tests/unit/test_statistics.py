"""The report's paired statistics (cl_bench/reporting/statistics.py) on fixed numbers:
paired differences against SciPy, the bold rule, upper bounds, ranks, the Friedman test
and the critical difference."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from cl_bench.cards.catalogue import check_upper_bound, is_upper_bound
from cl_bench.errors import UserError
from cl_bench.reporting.cd_plot import diagram, groups
from cl_bench.reporting.report import METRICS, aggregate, grid
from cl_bench.reporting.statistics import (
    Paired,
    comparisons,
    critical_difference,
    paired,
    paired_statistics,
    rank_cells,
    ranks,
)

PAIRED = [m for m in METRICS if m.spread]
SEEDS = [1993, 1994, 1995, 1996, 1997]
# standardised to mean 0 and sample std 1: a column of mean m and std s is m + s * Z
Z = np.array([-2.0, -1.0, 0.0, 1.0, 2.0]) / math.sqrt(2.5)


def runs_of(values: dict[str, list[float]], scenario: str = "s", seeds=SEEDS) -> pd.DataFrame:
    """A report's runs frame: one configuration per method, avg acc as given per seed,
    last acc 10 lower, forgetting 100 minus avg acc, every other metric 1."""
    rows = []
    for method, accs in values.items():
        for seed, acc in zip(seeds, accs, strict=False):
            row = {m.key: 1.0 for m in METRICS}
            row.update(avg_acc=acc, last_acc=acc - 10, forgetting=100 - acc)
            rows.append(
                {
                    "scenario": scenario,
                    "method": method,
                    "protocol": "fair",
                    "config": f"{scenario}-{method}",
                    "label": method,
                    "seed": seed,
                    **row,
                }
            )
    return pd.DataFrame(rows)


def no_upper(method: str) -> bool:
    return False


def joint_upper(method: str) -> bool:
    return method == "joint"


def test_paired_difference_equals_scipy():
    d = np.array([1.0, 2.0, 0.5, 1.5, 3.0])
    base = pd.Series([80.0, 81.0, 79.0, 82.0, 80.5], index=SEEDS)
    found = paired(base + d, base)
    one = stats.ttest_1samp(d, 0.0)
    interval = one.confidence_interval(0.95)
    assert found.n == 5
    assert found.mean == pytest.approx(1.6, abs=1e-12)
    assert found.low == pytest.approx(interval.low, abs=1e-12)
    assert found.high == pytest.approx(interval.high, abs=1e-12)
    assert found.p == pytest.approx(one.pvalue, abs=1e-12)
    # by hand: sd = sqrt(3.7 / 4), t_{0.975, 4} = 2.7764451052
    half = 2.7764451051977987 * math.sqrt(3.7 / 4 / 5)
    assert (found.low, found.high) == pytest.approx((1.6 - half, 1.6 + half), abs=1e-9)
    assert found.p == pytest.approx(0.020475874420910672, abs=1e-12)
    assert found.significant
    assert found.text(2) == "1.60 [0.41, 2.79] *"


def test_unpaired_seeds_are_dropped_and_one_pair_is_not_available():
    d = pd.Series([1.0, 2.0, 0.5, 1.5, 3.0], index=SEEDS)
    base = pd.Series(80.0, index=SEEDS)
    full = paired(base + d, base)
    extra = paired(
        pd.concat([base + d, pd.Series([1000.0], index=[7])]),
        pd.concat([base, pd.Series([-5.0, np.nan], index=[8, 9])]),
    )
    assert extra == full
    one = paired(pd.Series([90.0, 91.0], index=[1, 2]), pd.Series([80.0, 70.0], index=[2, 3]))
    assert one.n == 1 and math.isnan(one.mean) and math.isnan(one.p)
    assert not one.significant and one.text(2) == "n/a"
    assert paired(pd.Series([90.0], index=[1]), pd.Series([80.0], index=[2])).n == 0


def test_text_uses_a_minus_sign_and_no_negative_zero():
    assert Paired(5, -1.0712, -2.9, 0.8, 0.2).text(2) == "−1.07 [−2.90, 0.80]"
    assert Paired(5, -0.001, -0.004, 0.002, 0.01).text(2) == "0.00 [0.00, 0.00] *"
    # identical runs: every difference 0, no test (p NaN), not significant
    zero = paired(pd.Series([1.0, 2.0], index=[1, 2]), pd.Series([1.0, 2.0], index=[1, 2]))
    assert (zero.n, zero.mean, zero.low, zero.high) == (2, 0.0, 0.0, 0.0)
    assert math.isnan(zero.p) and not zero.significant


def _bold(g) -> dict[str, str]:
    return {g.header[i]: row[0][0] for row in g.rows for i, (_, b) in enumerate(row) if b}


def _grid(runs: pd.DataFrame, upper=no_upper, against=None):
    table = aggregate(runs, published_for=lambda method, scenario: None)
    return grid(table, comparisons(runs, PAIRED, against, upper)["s"])


def test_the_issues_example_is_not_bold_when_not_significant():
    simplecil = 89.22 + 5.18 * Z
    ranpac = 88.15 + 6.87 * Z[[2, 0, 4, 1, 3]]  # another order of the seeds
    runs = runs_of({"simplecil": list(simplecil), "ranpac": list(ranpac)})
    assert stats.ttest_rel(simplecil, ranpac).pvalue > 0.05
    g = _grid(runs)
    rows = {row[0][0]: row for row in g.rows}
    assert rows["simplecil"][2][0] == "89.22 ± 5.18"
    assert rows["ranpac"][2][0] == "88.15 ± 6.87"
    assert "avg acc (%)" not in _bold(g) and "last acc (%)" not in _bold(g)
    assert g.header[3] == "Δ avg acc vs simplecil"
    assert rows["simplecil"][3][0] == "reference"
    found = paired(pd.Series(ranpac, index=SEEDS), pd.Series(simplecil, index=SEEDS))
    assert rows["ranpac"][3][0] == found.text(2) and not found.text(2).endswith("*")
    assert found.mean == pytest.approx(88.15 - 89.22, abs=1e-12)
    # the same means with the gap held on every seed: significant, so bold
    steady = runs_of({"simplecil": list(simplecil), "ranpac": list(simplecil - 1.07)})
    g = _grid(steady)
    assert _bold(g)["avg acc (%)"] == "simplecil"
    assert _bold(g)["forgetting (%)"] == "simplecil"  # 100 - acc: lower is better
    assert {row[0][0]: row[3][0] for row in g.rows}["ranpac"] == "−1.07 [−1.07, −1.07] *"


def test_upper_bounds_are_never_bold_nor_the_reference_and_come_last():
    simplecil = 89.22 + 5.18 * Z
    runs = runs_of(
        {"joint": list(simplecil + 5), "simplecil": list(simplecil), "ranpac": list(simplecil - 2)}
    )
    g = _grid(runs, joint_upper)
    assert [row[0][0] for row in g.rows] == ["ranpac", "simplecil", "joint [upper bound]"]
    assert _bold(g)["avg acc (%)"] == "simplecil"
    assert g.header[3] == "Δ avg acc vs simplecil"
    assert g.rows[2][3][0] == "5.00 [5.00, 5.00] *"  # compared, yet not bold
    # without the card's mark joint would be the bold reference
    plain = _grid(runs)
    assert _bold(plain)["avg acc (%)"] == "joint" and plain.header[3] == "Δ avg acc vs joint"
    # asked for, an upper bound is the reference
    assert _grid(runs, joint_upper, against="joint").header[3] == "Δ avg acc vs joint"


def test_the_card_field_marks_joint_alone(tmp_path):
    assert is_upper_bound("joint") is True
    assert is_upper_bound("simplecil") is False and is_upper_bound("no-such") is False
    with pytest.raises(UserError, match="must be true or false"):
        check_upper_bound(tmp_path / "x.yaml", {"upper_bound": "yes"})


def test_against_names_a_method_or_a_label():
    runs = runs_of({"simplecil": [90, 91, 92], "ranpac": [80, 82, 81]})
    assert comparisons(runs, PAIRED, "ranpac", no_upper)["s"].reference == "ranpac"
    with pytest.raises(UserError, match='no row of the report is "ranpac2".*ranpac'):
        comparisons(runs, PAIRED, "ranpac2", no_upper)
    two = pd.concat(
        [
            runs.assign(label=runs["label"].replace("ranpac", "ranpac (a)")),
            runs_of({"ranpac": [1, 2, 3]}).assign(config="b", label="ranpac (b)"),
        ]
    )
    with pytest.raises(UserError, match="has 2 configurations on s: ranpac \\(a\\); ranpac"):
        comparisons(two, PAIRED, "ranpac", no_upper)
    assert comparisons(two, PAIRED, "ranpac (b)", no_upper)["s"].reference == "ranpac (b)"


def test_paired_statistics_frame():
    runs = runs_of({"simplecil": [90, 91, 92, 93], "ranpac": [80, 82, 81]})
    frame = paired_statistics(runs, PAIRED, None, no_upper)
    assert len(frame) == 2 * 3
    row = frame[(frame["label"] == "ranpac") & (frame["metric"] == "avg_acc")].iloc[0]
    ref = stats.ttest_rel([80, 82, 81], [90, 91, 92])
    assert row["n"] == 3 and row["reference"] == "simplecil"
    assert row["difference"] == pytest.approx(-10.0, abs=1e-12)
    assert row["p"] == pytest.approx(ref.pvalue, abs=1e-12)
    assert row["ci_low"] == pytest.approx(ref.confidence_interval().low, abs=1e-12)
    forgetting = frame[(frame["label"] == "simplecil") & (frame["metric"] == "forgetting")]
    assert forgetting["bold"].item() and forgetting["n"].item() == 4


def _table(values: dict[str, dict[str, float]], extra: dict[str, float] | None = None):
    """An aggregated table: scenario -> method -> avg acc (last acc 10 lower,
    forgetting 100 minus it)."""
    rows = []
    for scenario, by_method in values.items():
        for method, acc in {**by_method, **(extra or {})}.items():
            rows.append(
                {
                    "scenario": scenario,
                    "method": method,
                    "label": method,
                    "avg_acc_mean": acc,
                    "last_acc_mean": acc - 10,
                    "forgetting_mean": 100 - acc,
                }
            )
    return pd.DataFrame(rows)


FIXED = {
    "s1": {"A": 90, "B": 85, "C": 80, "D": 70},
    "s2": {"A": 88, "B": 89, "C": 75, "D": 74},
    "s3": {"A": 92, "B": 80, "C": 81, "D": 60},
}


def test_ranks_friedman_and_critical_difference_on_a_fixed_table():
    found = ranks(_table(FIXED, {"joint": 99}), PAIRED, joint_upper)
    assert (found.k, found.n) == (4, 3)
    assert list(found.average.index) == ["A", "B", "C", "D"]
    for key in ("avg_acc", "last_acc", "forgetting"):
        assert found.average[key].tolist() == pytest.approx([4 / 3, 2, 8 / 3, 4], abs=1e-12)
        # 12 / (N k (k+1)) * sum of squared rank sums - 3 N (k+1) = 0.2 * 260 - 45
        statistic, p = found.friedman[key]
        assert statistic == pytest.approx(7.0, abs=1e-12)
        assert p == pytest.approx(stats.chi2.sf(7.0, 3), abs=1e-12)
    q = stats.studentized_range.ppf(0.95, 4, np.inf) / math.sqrt(2)
    assert found.cd == pytest.approx(q * math.sqrt(4 * 5 / 18), abs=1e-12)
    assert found.cd == pytest.approx(2.708, abs=1e-3)
    header, rows, notes = rank_cells(found, PAIRED)
    assert header == ["method", "avg acc rank", "last acc rank", "forgetting rank"]
    assert rows[0] == [("A", False), ("1.33", False), ("1.33", False), ("1.33", False)]
    assert "avg acc χ² = 7.00, p = 0.072" in notes[1] and "CD = 2.71" in notes[2]


def test_the_critical_difference_matches_demsars_table():
    # Demšar (2006), Table 5(a): q_0.05 for k = 2..6
    for k, q in ((2, 1.960), (3, 2.343), (4, 2.569), (5, 2.728), (6, 2.850)):
        assert critical_difference(k, 6) == pytest.approx(q * math.sqrt(k * (k + 1) / 36), abs=2e-3)


def test_too_few_scenarios_or_methods_is_one_line():
    one = ranks(_table({"s1": FIXED["s1"]}), PAIRED, no_upper)
    assert one == (
        "Ranks across scenarios need at least 2 scenarios and 3 methods that ran on all "
        "of them (upper bounds left out); this report has 1 scenario(s) and 4 such method(s)."
    )
    partial = {"s1": FIXED["s1"], "s2": {"A": 1, "B": 2, "E": 3}}
    assert "2 scenario(s) and 2 such method(s)" in ranks(_table(partial), PAIRED, no_upper)


def test_critical_difference_groups_and_diagram():
    average = pd.Series({"A": 4 / 3, "B": 2.0, "C": 8 / 3, "D": 4.0})
    assert groups(average, 2.708) == [(4 / 3, 4.0)]
    assert groups(average, 1.0) == [(4 / 3, 2.0), (2.0, 8 / 3)]
    assert groups(average, 0.5) == []
    plot = diagram(average, 1.0, "avg acc", 3)
    assert plot.name == "critical-difference-avg-acc"
    texts = {t.get_text() for t in plot.figure.axes[0].texts}
    assert {"A (1.33)", "B (2.00)", "(2.67) C", "(4.00) D", "CD = 1.00"} <= texts
