"""Suites outside the gate: a suite (``benchmarks/<suite>.yaml`` or a ``--cards`` folder,
a ``runs:`` list of entries) run by ``cl-bench run --suite``, reported by ``cl-bench
report --suite`` and listed by ``cl-bench list suites``. A suite's runs go to
``results/<suite>`` unless told otherwise, where ``cl-bench check --suite`` puts them too,
so that either command reuses what the other finished."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cl_bench import arguments
from cl_bench.errors import UserError

if TYPE_CHECKING:
    from cl_bench.engine.runner import RunRequest

__all__ = ["plan_suite", "refuse_fixed", "suite_lines", "suite_out", "suite_scope"]

# run's options that an entry of the suite fixes: refused beside --suite
FIXED_BY_ENTRIES = (
    "methods",
    "tuned",
    "scenario",
    "seeds",
    "protocol",
    "sets",
    "backbone",
    "weights",
    "image_size",
    "precision",
    "config",
)


def suite_out(suite: str) -> Path:
    """Where a suite's runs go by default: ``results/<suite>``."""
    return Path("results") / arguments.text("suite", suite, 'suite="ci"')


def plan_suite(
    suite: str,
    *,
    out: str | Path | None = None,
    device: str = "auto",
    deterministic: str = "strict",
    data_root: str | Path | None = None,
    download: bool = False,
    progress: bool = False,
) -> list[RunRequest]:
    """One request per entry of the suite (scenario, backbone, methods, seeds, sets as the
    entry says; a sets item with commas sweeps, one request per configuration, as
    ``--set`` does), as ``cl-bench run --suite`` runs it: give the requests to
    :func:`cl_bench.api.run_requests`, :func:`cl_bench.api.launch` or
    :func:`cl_bench.api.dry_run`. ``out`` None: :func:`suite_out`."""
    from cl_bench.engine.environment import check_determinism_name, check_device_name
    from cl_bench.gate.suite import load_suite, suite_requests

    loaded = load_suite(arguments.text("suite", suite, 'suite="ci"'))
    check_device_name(arguments.text("device", device, 'device="cuda"'))
    check_determinism_name(arguments.text("deterministic", deterministic, 'deterministic="fast"'))
    folder = suite_out(suite) if out is None else arguments.folder("out", out, 'out="results"')
    return suite_requests(
        loaded,
        folder,
        arguments.flag("progress", progress),
        device=device,
        deterministic=deterministic,
        data_root=arguments.folder("data_root", data_root, 'data_root="~/data"', optional=True),
        download=arguments.flag("download", download),
    )


def refuse_fixed(suite: str, given: list[str]) -> None:
    """``--suite`` beside an option that the suite's entries fix: refused, naming it."""
    fixed = [name for name in FIXED_BY_ENTRIES if name in given]
    if fixed:
        flags = ", ".join("--" + ("set" if n == "sets" else n.replace("_", "-")) for n in fixed)
        raise UserError(
            f"--suite {suite} runs the suite's entries, each with its own scenario, methods, "
            f"seeds, settings and backbone: leave out {flags}, or run without --suite."
        )


def suite_scope(suite: str) -> tuple[list[str], list[str]]:
    """The scenarios and the methods of a suite's entries (what ``report --suite``
    shows)."""
    from cl_bench.gate.suite import load_suite

    entries = load_suite(arguments.text("suite", suite, 'suite="ci"'))["runs"]
    scenarios = list(dict.fromkeys(str(e.get("scenario", "fmnist")) for e in entries))
    methods = list(dict.fromkeys(str(m) for e in entries for m in e["methods"]))
    return scenarios, methods


def suite_lines() -> tuple[list[str], list[str]]:
    """``cl-bench list suites``: one line per suite (name, entries, runs, where it comes
    from), and one paragraph per suite that cannot be read."""
    from cl_bench.cards.catalogue import card_index
    from cl_bench.cards.sources import BUILTIN
    from cl_bench.cards.sweep import expand_sets
    from cl_bench.gate.suite import load_suite

    lines, bad = [], []
    for name, found in sorted(card_index()["suite"].items()):
        try:
            entries = load_suite(name)["runs"]
        except UserError as e:
            bad.append(e.paragraph())
            continue
        runs = sum(
            len(e["methods"]) * len(e.get("seeds", [1993])) * len(expand_sets(e.get("sets", [])))
            for e in entries
        )
        origin = found.origin if found.origin == BUILTIN else f"{found.origin}: {found.path}"
        lines.append(f"{name:14s} {len(entries)} entries, {runs} runs  ({origin})")
    return lines, bad
