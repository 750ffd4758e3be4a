"""Results read back: every run of a results folder as a DataFrame, the report of a
folder, and the state of every run in it (``cl-bench report`` and ``cl-bench status``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from cl_bench import arguments
from cl_bench.errors import refuse_long_names

if TYPE_CHECKING:
    import pandas as pd

    from cl_bench.reporting.status import RunState
    from cl_bench.store.records import Result

__all__ = [
    "SkippedResultWarning",
    "load_results",
    "paired_statistics",
    "report",
    "status",
    "status_text",
    "summary_table",
]

Skipped = Callable[[Path, str], None]


class SkippedResultWarning(UserWarning):
    """A result file that is not a complete, valid record was left out (and why)."""


def _warn(path: Path, why: str) -> None:
    # 4: this function, the API function, its refuse_long_names wrapper, the caller
    warnings.warn(f"skipped {path}: {why}", SkippedResultWarning, stacklevel=4)


@refuse_long_names
def load_results(
    folder: str | Path = "results",
    *,
    scenarios: Iterable[str] = (),
    methods: Iterable[str] = (),
    on_skip: Skipped | None = None,
    allow_stale: bool = False,
) -> pd.DataFrame:
    """Every finished run in a results folder, one row each (the columns of
    :meth:`Result.row` and the report's ``label``), sorted by scenario, method,
    configuration and seed; optionally only some scenarios or methods.

    A file that is not a valid record is left out with a :class:`SkippedResultWarning`
    (or ``on_skip(path, why)``); a folder without finished runs is a UserError, and so
    is a stale result (of other code or packages) unless ``allow_stale``, which keeps it
    with its ``stale`` column saying what changed and ``[stale]`` in its label."""
    from cl_bench.reporting.report import load_runs

    say = arguments.callback("on_skip", on_skip) or _warn
    runs, skipped = load_runs(
        arguments.folder("folder", folder, 'folder="results"'),
        arguments.names("scenarios", scenarios, 'scenarios=["fmnist"]'),
        arguments.names("methods", methods, 'methods=["tosca"]'),
        arguments.flag("allow_stale", allow_stale),
    )
    for path, why in skipped:
        say(path, why)
    return runs


@refuse_long_names
def report(
    folder: str | Path = "results",
    out: str | Path = "reports/latest",
    *,
    formats: str | Iterable[str] | None = None,
    images: str | Iterable[str] | None = None,
    scenarios: Iterable[str] = (),
    methods: Iterable[str] = (),
    on_skip: Skipped | None = None,
    allow_stale: bool = False,
    against: str | None = None,
    figure_size: str | tuple[float, float] | None = None,
    dpi: int | None = None,
) -> list[Path]:
    """Write the report of a results folder into ``out`` (its report files replaced), as
    ``cl-bench report`` does: ``formats`` of md, tex, csv, html and plot ``images`` png,
    svg, pdf (None: all of them; empty: none), figures of ``figure_size`` inches
    ("6.4x4" or (6.4, 4.0); None: 7.2x4.5) at ``dpi`` (None: 150). Returns the files
    written. Invalid result files are skipped and stale ones refused (unless ``allow_stale``) as in
    :func:`load_results`. Each scenario's rows are compared, paired by seed, with the
    row ``against`` names (a method or a row's label; None: the best by average
    accuracy), as :func:`paired_statistics` does."""
    from cl_bench.input_checks import writable_dir
    from cl_bench.reporting.report import FORMATS, IMAGE_FORMATS, write_report

    folder = arguments.folder("folder", folder, 'folder="results"')
    out = arguments.folder("out", out, 'out="reports/latest"')
    selected = (
        arguments.names("scenarios", scenarios, 'scenarios=["fmnist"]'),
        arguments.names("methods", methods, 'methods=["tosca"]'),
    )
    kinds = (
        arguments.names(
            "formats", FORMATS if formats is None else formats, 'formats=["md", "csv"]'
        ),
        arguments.names("images", IMAGE_FORMATS if images is None else images, 'images=["png"]'),
    )
    say = arguments.callback("on_skip", on_skip) or _warn
    writable_dir(out, "--out")
    written, skipped = write_report(
        folder,
        out,
        *selected,
        *kinds,
        allow_stale=arguments.flag("allow_stale", allow_stale),
        against=_against(against),
        figure_size=figure_size,
        dpi=dpi,
    )
    for path, why in skipped:
        say(path, why)
    return written


def _against(against: object) -> str | None:
    return arguments.text("against", against, 'against="simplecil"', optional=True)


@refuse_long_names
def paired_statistics(
    folder: str | Path = "results",
    *,
    against: str | None = None,
    scenarios: Iterable[str] = (),
    methods: Iterable[str] = (),
    on_skip: Skipped | None = None,
    allow_stale: bool = False,
) -> pd.DataFrame:
    """The report's paired comparison as a DataFrame: per scenario, configuration (the
    report's row) and metric (avg_acc, last_acc, forgetting), the row minus the
    reference row over the seeds both ran, paired by seed (a seed fixes the class
    order, so both saw the same stream). Columns: scenario, label, method, config,
    upper_bound, reference, metric, mean, n (shared seeds), difference (mean of the
    differences), ci_low and ci_high (its 95 % t-interval), p (paired t-test,
    :func:`scipy.stats.ttest_rel`), significant (p < 0.05) and bold (the report's bold
    rule). Below 2 shared seeds the numbers are NaN.

    The reference is the row ``against`` names (a method, or a label where a method has
    several rows), else the best row by mean average accuracy that is not an upper
    bound (a card with ``upper_bound: true``, as Joint). The paired t-test works from 2
    pairs on; the Wilcoxon signed-rank test cannot reach p < 0.05 below 6 pairs (its
    smallest two-sided p with 5 pairs is 0.0625). Runs are read as in
    :func:`load_results`."""
    from cl_bench.reporting.report import METRICS
    from cl_bench.reporting.statistics import paired_statistics as compute

    runs = load_results(
        folder, scenarios=scenarios, methods=methods, on_skip=on_skip, allow_stale=allow_stale
    )
    return compute(runs, [m for m in METRICS if m.spread], _against(against))


@refuse_long_names
def status(out: str | Path = "results") -> list[RunState]:
    """The state of every run in a results folder, as ``cl-bench status`` shows it: done,
    stale, running, failed, invalid or pending, with what it is (a stale result's
    changes, a failure's last line). Reads the folder and the installed code only."""
    from cl_bench.reporting.status import collect

    return collect(arguments.folder("out", out, 'out="results"'))


@refuse_long_names
def status_text(out: str | Path = "results") -> str:
    """:func:`status` as the table and one-line summary ``cl-bench status`` prints."""
    from cl_bench.reporting.status import render

    return render(status(out))


def summary_table(results: Iterable[Result]) -> str:
    """Runs as the table ``cl-bench run`` prints: one row per method (and protocol) and
    scenario, with its seeds and average, last and routing accuracy."""
    from cl_bench.reporting.summary import summary_table as table

    return table(results)
