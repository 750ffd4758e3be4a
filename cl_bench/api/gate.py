"""The accuracy gate (``cl-bench check``) as a function."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cl_bench import arguments
from cl_bench.errors import UserError, refuse_long_names

if TYPE_CHECKING:
    from cl_bench.gate.check import GateOutcome

__all__ = ["check"]


@refuse_long_names
def check(
    suite: str = "ci",
    *,
    out: str | Path | None = None,
    baseline: str | Path | None = None,
    tolerance: float | None = None,
    update_baseline: bool = False,
    progress: bool = False,
    echo: Callable[[str], None] | None = print,
) -> GateOutcome:
    """Run a suite (finished runs in ``out`` reused; None: ``results/<suite>``) and
    compare its average and last accuracy with the baseline, as ``cl-bench check``; or,
    with ``update_baseline``, rewrite the baseline with the numbers measured now.
    ``baseline`` None: the suite's own (``results/baselines/<suite>.json``);
    ``tolerance`` overrides every metric's.
    The :class:`~cl_bench.gate.check.GateOutcome` says whether it ``passed``, with its
    ``rows``, ``failed`` and ``improved`` rows and ``notes``. A missing or unusable
    baseline is a UserError before anything runs."""
    from cl_bench.api.suites import suite_out
    from cl_bench.gate.check import check as run_gate

    if tolerance is not None and (
        isinstance(tolerance, bool) or not isinstance(tolerance, (int, float))
    ):
        raise UserError(f"tolerance={tolerance!r} must be a number of accuracy points, e.g. 1.0.")
    return run_gate(
        arguments.text("suite", suite, 'suite="ci"'),
        suite_out(suite) if out is None else arguments.folder("out", out, 'out="results/ci"'),
        arguments.folder(
            "baseline", baseline, 'baseline="results/baselines/ci.json"', optional=True
        ),
        None if tolerance is None else float(tolerance),
        arguments.flag("update_baseline", update_baseline),
        arguments.callback("echo", echo) or (lambda _: None),
        arguments.flag("progress", progress),
    )
