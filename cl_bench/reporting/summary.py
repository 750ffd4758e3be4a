"""The table printed at the end of ``cl-bench run``: mean +- std over seeds."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

from cl_bench.store.records import Result
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
        groups[(r.method, ", ".join(r.protocol_label), r.scenario)].append(r)
    rows = [("method", "scenario", "seeds", "avg acc", "last acc", "routing (last)")]
    for (method, tag, scenario), rs in groups.items():
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
