"""The accuracy regression gate (``cl-bench check``): run a suite, compare it with its
committed baseline.

A suite (:mod:`cl_bench.gate.suite`) is a list of ``cl-bench run`` invocations; its
baseline (:mod:`cl_bench.gate.baseline`) holds per ``<entry>/<method>`` key and metric the
value, a tolerance and the provenance of the numbers. A drop by more than the tolerance,
or a key the run did not produce, fails the check; an improvement beyond tolerance is
reported so that the baseline is raised on purpose (``update_baseline``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cl_bench.errors import UserError
from cl_bench.gate import baseline as baselines
from cl_bench.gate.compare import Row, compare, environment_notes, table
from cl_bench.gate.suite import load_suite, refuse_sweeps, run_suite
from cl_bench.input_checks import writable_dir


@dataclass
class GateOutcome:
    """What :func:`check` found: ``rows`` (one per run and metric; empty when the baseline
    was rewritten), the ``notes`` on why values may differ besides the code, and the
    baseline file (``written``: rewritten with the numbers measured now)."""

    suite: str
    baseline: Path
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    written: bool = False

    @property
    def failed(self) -> list[Row]:
        """The rows that fail the gate: a drop beyond tolerance, or a run missing."""
        return [r for r in self.rows if r.status in ("DROP", "MISSING")]

    @property
    def improved(self) -> list[Row]:
        """The rows better than the baseline by more than their tolerance."""
        return [r for r in self.rows if r.status == "IMPROVED"]

    @property
    def passed(self) -> bool:
        return not self.failed

    def table(self) -> str:
        """The comparison as a plain-text table (what ``cl-bench check`` prints)."""
        return table(self.rows)


def check(
    suite: str,
    out: Path,
    baseline: Path | None = None,
    tolerance: float | None = None,
    update_baseline: bool = False,
    echo: Callable[[str], None] = print,
    progress: bool = False,
) -> GateOutcome:
    """Run suite ``suite`` into ``out`` (finished runs reused) and compare it with the
    baseline (default: :func:`~cl_bench.gate.baseline.default_baseline`), or rewrite the
    baseline with what was measured. Every input mistake (tolerance, suite, a missing or
    unusable baseline, an unwritable baseline folder) is refused before the suite runs."""
    if tolerance is not None:
        baselines.check_tolerance(tolerance)
    suite_def = load_suite(suite)
    refuse_sweeps(suite_def)  # before the baseline is read or anything runs
    path = baseline or baselines.default_baseline(suite, writing=update_baseline)
    if update_baseline:
        writable_dir(path.parent, "The baseline's folder")
        if path.is_dir():  # found only when written, after the whole suite ran
            raise UserError(
                f"--baseline {path} is a folder; give the file to write, e.g. "
                f"--baseline {path / f'{suite}.json'}."
            )
    else:  # a missing or unusable baseline is refused before the suite runs, not after
        base = baselines.read_baseline(path, suite_def)
    measured = run_suite(suite_def, out, echo, progress)
    if update_baseline:
        new = baselines.new_baseline(suite_def, measured, 1.0 if tolerance is None else tolerance)
        baselines.write_baseline(path, new)
        return GateOutcome(suite, path, written=True)
    rows = compare(base, measured, tolerance, suite=suite_def)
    return GateOutcome(suite, path, rows, environment_notes(rows, base, measured))
