"""The public Python API: everything the command line does, as functions.

    import cl_bench
    done = cl_bench.run(["tosca", "simplecil"], scenario="fmnist", seeds=[1993, 1994],
                        settings={"tosca.epochs": 5, "scenario.increment": 2})
    grid = cl_bench.run_grid(["tosca", "l2p"], scenario="fmnist", launcher="local", jobs=2)
    runs = cl_bench.load_results("results")     # a pandas DataFrame, one row per run
    cl_bench.report("results", out="reports/latest")
    gate = cl_bench.check("ci")                 # gate.passed, gate.rows

The command line is a layer over these functions (it parses arguments and prints), so a
run started here and the same ``cl-bench run`` command share their result files: the
same configuration hash, the same numbers, and either one skips what the other finished.
Bad input raises :class:`cl_bench.errors.UserError` before anything is written.
"""

from cl_bench.api.catalogue import account, account_table, cache, cards, check_data, listing
from cl_bench.api.config_file import config_digest, config_options, load_config, merge_options
from cl_bench.api.gate import check
from cl_bench.api.grid import dry_run, launch, launch_options, run_grid
from cl_bench.api.results import (
    SkippedResultWarning,
    load_results,
    paired_statistics,
    report,
    status,
    status_text,
    summary_table,
)
from cl_bench.api.runs import RunsFailed, plan, run, run_requests, settings_as_sets
from cl_bench.api.suites import plan_suite, refuse_fixed, suite_out, suite_scope
from cl_bench.api.sweeps import Sweep, sweep
from cl_bench.api.tune import TUNE_OUT, apply_tuned, tune
from cl_bench.errors import UserError

__all__ = [
    "RunsFailed",
    "SkippedResultWarning",
    "Sweep",
    "TUNE_OUT",
    "UserError",
    "account",
    "account_table",
    "apply_tuned",
    "cache",
    "cards",
    "check",
    "check_data",
    "config_digest",
    "config_options",
    "dry_run",
    "launch",
    "launch_options",
    "listing",
    "load_config",
    "load_results",
    "merge_options",
    "paired_statistics",
    "plan",
    "plan_suite",
    "refuse_fixed",
    "report",
    "run",
    "run_grid",
    "run_requests",
    "settings_as_sets",
    "status",
    "status_text",
    "suite_out",
    "suite_scope",
    "summary_table",
    "sweep",
    "tune",
]
