"""Paired statistics of a report: each configuration against a reference over the seeds
both ran, the bold rule, and ranks across scenarios.

A seed fixes the class order, so two methods run with the same seed see the same
stream: their results pair by seed, and the test is on the per-seed differences, which
removes the spread the class order causes in both. The test is the paired t-test
(:func:`scipy.stats.ttest_rel`) with its 95 % t-interval of the mean difference: it
works from 2 shared seeds on. The Wilcoxon signed-rank test, which assumes no normal
differences, cannot reject at 5 % below 6 pairs: its smallest two-sided p-value with 5
pairs is 2/2^5 = 0.0625, and benchmarks run 3 to 5 seeds.

Bold marks the best row of a seed-dependent column only where the paired t-test puts it
ahead of the runner-up (by mean) at p < 0.05; otherwise no row of that column is bold.
A method whose card says ``upper_bound: true`` (Joint: it trains on every task at once)
is never bold, is not a default reference and takes no rank across scenarios.

Across scenarios (at least 2 of them, and 3 configurations, by label, that ran on every
one): the average rank per metric (1: best; ties share their mean rank), the Friedman
test (:func:`scipy.stats.friedmanchisquare`, scenarios as blocks) and the Nemenyi
critical difference ``q / sqrt(2) * sqrt(k (k + 1) / (6 N))``, ``q`` the 95 % quantile
of the studentized range of ``k`` means with infinite degrees of freedom
(:data:`scipy.stats.studentized_range`): two average ranks closer than it do not differ
significantly (Demšar, JMLR 7, 2006).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd
from scipy import stats

from cl_bench.errors import UserError, suggest

ALPHA = 0.05
CONFIDENCE = 0.95
MIN_SEEDS = 2  # shared seeds a paired difference needs
MIN_SCENARIOS, MIN_METHODS = 2, 3  # for ranks across scenarios
UPPER_MARK = " [upper bound]"
REFERENCE = "reference"
NOT_AVAILABLE = "n/a"


class MetricLike(Protocol):
    """A report column (:class:`cl_bench.reporting.report.Metric`): best = max if
    ``higher`` else min."""

    @property
    def key(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def higher(self) -> bool: ...
    @property
    def decimals(self) -> int: ...


@dataclass(frozen=True)
class Paired:
    """One row minus the reference over their shared seeds: ``n`` pairs, the mean
    difference, its 95 % t-interval and the paired t-test's two-sided p-value (NaN
    below :data:`MIN_SEEDS` pairs, and p NaN where every difference is 0)."""

    n: int
    mean: float
    low: float
    high: float
    p: float

    @property
    def significant(self) -> bool:
        return self.n >= MIN_SEEDS and bool(self.p < ALPHA)

    def text(self, decimals: int) -> str:
        """'−1.07 [−2.90, 0.76] *' (* where p < 0.05), or 'n/a'."""
        if self.n < MIN_SEEDS:
            return NOT_AVAILABLE
        a, b, c = (signed(v, decimals) for v in (self.mean, self.low, self.high))
        return f"{a} [{b}, {c}]" + (" *" if self.significant else "")


def signed(value: float, decimals: int) -> str:
    """A number with a minus sign (U+2212) and no negative zero."""
    value = round(value, decimals) + 0.0  # -0.0 + 0.0 is 0.0
    return f"{value:.{decimals}f}".replace("-", "−")


def paired(values: pd.Series, reference: pd.Series) -> Paired:
    """``values`` minus ``reference``, both indexed by seed, over the seeds both have (a
    seed only one of them ran, or a missing value, is left out)."""
    a, b = values.dropna(), reference.dropna()
    shared = a.index.intersection(b.index).sort_values()
    n = len(shared)
    if n < MIN_SEEDS:
        return Paired(n, math.nan, math.nan, math.nan, math.nan)
    x, y = a[shared].to_numpy(float), b[shared].to_numpy(float)
    with warnings.catch_warnings():  # identical or constant differences: t is 0/0 or inf
        warnings.simplefilter("ignore", RuntimeWarning)
        test = stats.ttest_rel(x, y)
        interval = test.confidence_interval(CONFIDENCE)
    return Paired(
        n, float(np.mean(x - y)), float(interval.low), float(interval.high), float(test.pvalue)
    )


def card_upper_bound(method: str) -> bool:
    """Whether ``method``'s card says ``upper_bound: true``."""
    from cl_bench.cards.catalogue import is_upper_bound

    return is_upper_bound(method)


@dataclass
class Comparison:
    """One scenario's statistics: the reference row, each row's paired difference in the
    primary metric, the bold row per metric (None: no significant best) and the
    upper-bound rows (configuration hashes)."""

    primary: MetricLike
    reference: str | None  # the reference row's label
    deltas: dict[str, Paired] = field(default_factory=dict)  # config -> vs the reference
    bold: dict[str, str | None] = field(default_factory=dict)  # metric key -> config
    upper: frozenset[str] = frozenset()
    missing: str | None = None  # --against names no row of this scenario
    reference_config: str | None = None

    @property
    def header(self) -> str:
        return f"Δ {self.primary.title} vs {self.reference or self.missing}"

    def delta(self, config: str) -> str:
        if config == self.reference_config:
            return REFERENCE
        found = self.deltas.get(config)
        return found.text(self.primary.decimals) if found else NOT_AVAILABLE

    def notes(self) -> list[str]:
        where = (
            f"{self.missing} has no runs on this scenario"
            if self.missing
            else f"each row minus {self.reference}"
        )
        return [
            f"Δ {self.primary.title}: {where}, over the seeds both ran (a seed fixes the "
            "class order: paired by seed), mean [95 % t-interval]; * p < 0.05 (paired "
            f"t-test); {NOT_AVAILABLE}: fewer than {MIN_SEEDS} shared seeds. Bold: the best "
            "of an accuracy or forgetting column only where the paired t-test puts it ahead "
            f"of the runner-up at p < {ALPHA}; [upper bound] rows are never bold."
        ]


def _values(runs: pd.DataFrame, config: str, key: str) -> pd.Series:
    own = runs[runs["config"] == config]
    return pd.Series(own[key].to_numpy(float), index=own["seed"].to_numpy())


def _reference(rows: pd.DataFrame, against: str | None, primary: MetricLike, scenario: str):
    """The reference row of one scenario (its rows: one per configuration, with
    ``mean`` and ``upper``), or None where ``against`` names none of them."""
    if against is None:
        pool = rows[~rows["upper"]] if (~rows["upper"]).any() else rows
        return pool.sort_values("mean", ascending=not primary.higher, kind="stable").iloc[0]
    hit = rows[rows["label"] == against]
    if hit.empty:
        hit = rows[rows["method"] == against]
    if len(hit) > 1:
        raise UserError(
            f'--against {against}: "{against}" has {len(hit)} configurations on '
            f"{scenario}: {'; '.join(hit['label'])}. Name one by its label, e.g. "
            f"--against '{hit['label'].iloc[0]}'."
        )
    return None if hit.empty else hit.iloc[0]


def _best(rows: pd.DataFrame, runs: pd.DataFrame, metric: MetricLike) -> str | None:
    """The configuration bold in ``metric``'s column: the best by mean, where the paired
    t-test puts it ahead of the runner-up at p < ALPHA; else None."""
    pool = (
        rows[~rows["upper"]].assign(mean=lambda r: r[f"{metric.key}_mean"]).dropna(subset=["mean"])
    )
    if len(pool) < 2:
        return None
    best, runner = pool.sort_values("mean", ascending=not metric.higher, kind="stable").iloc[:2][
        "config"
    ]
    test = paired(_values(runs, best, metric.key), _values(runs, runner, metric.key))
    ahead = test.mean > 0 if metric.higher else test.mean < 0
    return best if test.significant and ahead else None


def _configurations(
    runs: pd.DataFrame, metrics: Sequence[MetricLike], upper_bound_for: Callable[[str], bool]
) -> pd.DataFrame:
    """One row per (scenario, configuration): label, method, upper, ``<key>_mean``."""
    keys = ["scenario", "config", "label", "method"]
    rows = runs.groupby(keys, sort=False)[[m.key for m in metrics]].mean()
    rows.columns = [f"{k}_mean" for k in rows.columns]
    rows = rows.reset_index()
    rows["upper"] = [bool(upper_bound_for(m)) for m in rows["method"]]
    return rows


def comparisons(
    runs: pd.DataFrame,
    metrics: Sequence[MetricLike],
    against: str | None = None,
    upper_bound_for: Callable[[str], bool] = card_upper_bound,
) -> dict[str, Comparison]:
    """Per scenario of ``runs`` (the report's runs frame), the :class:`Comparison` of
    its configurations; ``metrics[0]`` is the primary metric (the Δ column and the
    default reference: the best non-upper-bound row by its mean). ``against`` names the
    reference by label or method; a UserError when no scenario has it or a method name
    fits several configurations of a scenario."""
    primary = metrics[0]
    configs = _configurations(runs, metrics, upper_bound_for)
    if against is not None and not (
        configs["label"].eq(against).any() or configs["method"].eq(against).any()
    ):
        names = sorted({*configs["method"], *configs["label"]})
        raise UserError(
            f'--against {against}: no row of the report is "{against}".'
            f"{suggest(against, names)} Name a method or a row's label: "
            f"{', '.join(names)}."
        )
    out = {}
    for scenario, rows in configs.groupby("scenario", sort=True):
        rows = rows.assign(mean=rows[f"{primary.key}_mean"])
        own = runs[runs["scenario"] == scenario]
        ref = _reference(rows, against, primary, str(scenario))
        done = Comparison(
            primary,
            None if ref is None else ref["label"],
            upper=frozenset(rows.loc[rows["upper"], "config"]),
            missing=against if ref is None else None,
            reference_config=None if ref is None else ref["config"],
        )
        if ref is not None:
            base = _values(own, ref["config"], primary.key)
            done.deltas = {
                c: paired(_values(own, c, primary.key), base)
                for c in rows["config"]
                if c != ref["config"]
            }
        done.bold = {m.key: _best(rows, own, m) for m in metrics}
        out[str(scenario)] = done
    return out


def paired_statistics(
    runs: pd.DataFrame,
    metrics: Sequence[MetricLike],
    against: str | None = None,
    upper_bound_for: Callable[[str], bool] = card_upper_bound,
) -> pd.DataFrame:
    """One row per (scenario, configuration, metric): the configuration minus the
    scenario's reference (as :func:`comparisons` picks it) over their shared seeds:
    ``n``, ``difference`` (mean), ``ci_low``, ``ci_high`` (95 % t-interval), ``p``
    (paired t-test), ``significant`` (p < 0.05), and whether the row is bold in the
    report. The reference row itself has n = its seeds and a difference of 0."""
    found = comparisons(runs, metrics, against, upper_bound_for)
    configs = _configurations(runs, metrics, upper_bound_for)
    rows = []
    for row in configs.itertuples():
        c = found[row.scenario]
        own = runs[runs["scenario"] == row.scenario]
        for m in metrics:
            if c.reference_config is None:
                test = Paired(0, math.nan, math.nan, math.nan, math.nan)
            else:
                test = paired(
                    _values(own, row.config, m.key), _values(own, c.reference_config, m.key)
                )
            rows.append(
                {
                    "scenario": row.scenario,
                    "label": row.label,
                    "method": row.method,
                    "config": row.config,
                    "upper_bound": row.upper,
                    "reference": c.reference,
                    "metric": m.key,
                    "mean": getattr(row, f"{m.key}_mean"),
                    "n": test.n,
                    "difference": test.mean,
                    "ci_low": test.low,
                    "ci_high": test.high,
                    "p": test.p,
                    "significant": test.significant,
                    "bold": c.bold.get(m.key) == row.config,
                }
            )
    return pd.DataFrame(rows)


def critical_difference(k: int, n: int, alpha: float = ALPHA) -> float:
    """The Nemenyi critical difference of the average ranks of ``k`` methods over ``n``
    data sets."""
    q = stats.studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2)
    return float(q * math.sqrt(k * (k + 1) / (6 * n)))


@dataclass
class Ranks:
    """Average ranks across scenarios: ``average`` (index: label; a column per metric
    key, rank 1 best), the Friedman test per metric key (statistic, p), the critical
    difference, ``k`` configurations and ``n`` scenarios."""

    average: pd.DataFrame
    friedman: dict[str, tuple[float, float]]
    cd: float
    k: int
    n: int


def ranks(
    table: pd.DataFrame,
    metrics: Sequence[MetricLike],
    upper_bound_for: Callable[[str], bool] = card_upper_bound,
) -> Ranks | str:
    """Ranks, Friedman test and critical difference over the scenarios of ``table``
    (one row per scenario and configuration, with ``label``, ``method`` and
    ``<key>_mean``), for the configurations, by label, that every scenario has and
    that are not upper bounds; or one line saying why there are too few."""
    table = table[[not upper_bound_for(m) for m in table["method"]]]
    n_all = table["scenario"].nunique()
    wide = {
        m.key: table.pivot_table(index="scenario", columns="label", values=f"{m.key}_mean")
        for m in metrics
    }
    shared = sorted(set.intersection(*(set(w.dropna(axis=1).columns) for w in wide.values())))
    if n_all < MIN_SCENARIOS or len(shared) < MIN_METHODS:
        return (
            f"Ranks across scenarios need at least {MIN_SCENARIOS} scenarios and "
            f"{MIN_METHODS} methods that ran on all of them (upper bounds left out); this "
            f"report has {n_all} scenario(s) and {len(shared)} such method(s)."
        )
    average, friedman = {}, {}
    for m in metrics:
        values = wide[m.key][shared].to_numpy(float)
        rank = stats.rankdata(-values if m.higher else values, axis=1)
        average[m.key] = rank.mean(axis=0)
        with warnings.catch_warnings():  # every scenario ties all methods: 0/0
            warnings.simplefilter("ignore", RuntimeWarning)
            test = stats.friedmanchisquare(*values.T)
        friedman[m.key] = (float(test.statistic), float(test.pvalue))
    frame = pd.DataFrame(average, index=pd.Index(shared, name="label"))
    frame = frame.sort_values(metrics[0].key, kind="stable")
    return Ranks(frame, friedman, critical_difference(len(shared), n_all), len(shared), n_all)


def rank_cells(found: Ranks, metrics: Sequence[MetricLike]) -> tuple[list, list, list]:
    """(header, rows of (text, bold) cells, notes) of the ranks table."""
    header = ["method", *(f"{m.title} rank" for m in metrics)]
    rows = [
        [(label, False), *((f"{row[m.key]:.2f}", False) for m in metrics)]
        for label, row in found.average.iterrows()
    ]
    tests = "; ".join(
        f"{m.title} χ² = {found.friedman[m.key][0]:.2f}, p = {found.friedman[m.key][1]:.3f}"
        for m in metrics
    )
    notes = [
        f"Average rank over {found.n} scenarios of the {found.k} methods that ran on every "
        "one (1: best; ties share their mean rank; upper bounds left out).",
        f"Friedman test: {tests}.",
        f"Nemenyi critical difference (α = {ALPHA}): CD = {found.cd:.2f}; average ranks "
        "closer than CD do not differ significantly (a bar joins them in the diagram).",
    ]
    return header, rows, notes
