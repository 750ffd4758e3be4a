"""The table printed at the end of ``cl-bench run``: mean +- std over seeds."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

from cl_bench.store.records import Result, flatten
from cl_bench.text_table import text_table


def _cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:6.2f}"
    return f"{statistics.mean(values):6.2f} +- {statistics.stdev(values):5.2f}"


def unique(runs: Iterable[Result]) -> list[Result]:
    """One result per run (scenario, method, seed, config): a run listed twice is one
    sample of the mean, not two."""
    seen: dict[tuple, Result] = {}
    for r in runs:
        seen.setdefault(r.key, r)
    return list(seen.values())


def summary_table(runs: Iterable[Result]) -> str:
    """One row per method (and protocol), columns average / last accuracy."""
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for r in unique(runs):
        name = r.method + r.marks
        groups[(name, ", ".join(r.protocol_label), r.scenario)].append(r)
    rows = [("method", "scenario", "seeds", "avg acc", "last acc", "routing (last)")]
    for (method, tag, scenario), rs in [
        ((m, ", ".join(filter(None, [t, part])), sc), sub)
        for (m, t, sc), runs_of in groups.items()
        for part, sub in by_setting(runs_of).items()
    ]:
        routing = [r.routing_acc[-1] for r in rs if r.routing_acc]
        rows.append(
            (
                method + (f" [{tag}]" if tag else ""),
                scenario,
                str(len(rs)),
                _cell([r.avg_acc for r in rs]),
                _cell([r.last_acc for r in rs]),
                _cell(routing) if routing else "-",
            )
        )
    return "\n".join(text_table(rows))


def by_setting(runs: list[Result]) -> dict[str, list[Result]]:
    """The runs of one row split by the settings that differ between them (a sweep's):
    label (``lr=0.01``, ``scenario.increment=2``; empty when none differs) -> runs."""
    values = [
        flatten({"": r.config.get("method", {}), "scenario": r.config.get("scenario", {})})
        for r in runs
    ]
    keys = sorted({k for v in values for k in v})
    differ = [k for k in keys if len({repr(v.get(k)) for v in values}) > 1]
    out: dict[str, list[Result]] = defaultdict(list)
    for r, v in zip(runs, values, strict=True):
        out[", ".join(f"{k.removeprefix('.')}={v.get(k)}" for k in differ)].append(r)
    return out
