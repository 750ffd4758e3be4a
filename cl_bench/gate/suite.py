"""A suite of the accuracy gate (``benchmarks/<suite>.yaml``): a list of entries, each
one ``cl-bench run`` invocation (scenario, backbone, methods, seeds, --set values), found
among the cards, checked when it loads, and run (finished runs reused). A result is keyed
``<entry>/<method>``: the keys of the suite's baseline."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cl_bench.cards import catalogue, places
from cl_bench.cards.places import read_yaml
from cl_bench.cards.sweep import expand_sets, split_values, swept_items
from cl_bench.errors import UserError
from cl_bench.gate.suite_entries import check_entries
from cl_bench.store.records import Result

if TYPE_CHECKING:
    from cl_bench.engine.runner import RunRequest

METRICS = ("avg_acc", "last_acc")


def slug(value: str) -> str:
    """A setting's value as part of an entry name: ``0.01`` -> ``0.01``, ``[1, 2]`` -> ``1-2``."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", value).strip("-") or "value"


def load_suite(name: str) -> dict:
    found = catalogue.card_index()["suite"].get(name)
    if found is None:
        raise UserError(
            f'Unknown suite "{name}"; suites: '
            f"{', '.join(sorted(catalogue.card_index()['suite']))} (card files with a "
            f"runs: list, in {places.BENCHMARKS_DIR} or a --cards folder)."
        )
    path = found.path
    suite = read_yaml(path)
    suite.setdefault("name", name)
    check_entries(path, suite)
    return suite


@dataclass
class Measured:
    """What a suite gave: key -> metric -> mean over seeds, and per key the precision
    its runs used and the package versions they recorded."""

    values: dict[str, dict[str, float]] = field(default_factory=dict)
    precision: dict[str, str] = field(default_factory=dict)
    packages: dict[str, str] = field(default_factory=dict)
    device: dict[str, str] = field(default_factory=dict)  # "cpu" or "cuda sm_90" per key


def run_suite(suite: dict, out: Path, echo: Callable[[str], None], progress: bool) -> Measured:
    """Run (or reuse) every entry; return what :class:`Measured` holds."""
    from cl_bench.engine.runner import execute, preflight
    from cl_bench.packages import recorded

    measured = Measured()
    reqs = suite_requests(suite, out, progress)
    preflight(reqs)  # a bad last entry is refused before the first one writes anything
    for entry, req in zip(suite["runs"], reqs, strict=True):
        done = [Result.from_run(record, out) for record in execute(req, echo=echo)]
        for method in entry["methods"]:
            mine = [r for r in done if r.method == method]
            if mine:  # a run computed elsewhere right now is absent: reported as MISSING
                key = f"{entry['name']}/{method}"
                measured.values[key] = {
                    m: statistics.mean(getattr(r, m) for r in mine) for m in METRICS
                }
                measured.precision[key] = mine[0].config["backbone"]["precision"]
                measured.device[key] = mine[0].device
                measured.packages.update(recorded(mine[0].env))
    return measured


def refuse_sweeps(suite: dict) -> None:
    """The gate keeps one value per ``<entry>/<method>`` and metric in its baseline, so an
    entry whose ``sets`` sweep (several configurations of one method under one key) is
    refused there, naming the fix."""
    for entry in suite["runs"]:
        items = [s for s in entry.get("sets", []) if len(split_values(s)) > 1]
        if items:
            name, item = entry["name"], items[0]
            head, value = item.partition("=")[0].strip(), split_values(item)[0]
            raise UserError(
                f'Suite {suite["name"]}, entry {name!r} sweeps ("{item}"): `cl-bench '
                "check` compares one result per <entry>/<method> with its baseline, and a "
                "sweep gives several. Give each value an entry of its own (e.g. name: "
                f"{name}-{slug(value)} with sets: [{head}={value}]), or run and compare the "
                f"sweep with `cl-bench run --suite {suite['name']}` and `cl-bench report "
                f"--suite {suite['name']}`, which sweep."
            )


def suite_requests(suite: dict, out: Path, progress: bool, **common: Any) -> list[RunRequest]:
    """One request per entry of the suite and configuration of its sweep (an entry's
    ``sets`` as ``--set`` items: commas sweep), in order (``common``: more
    :class:`~cl_bench.engine.runner.RunRequest` fields for every entry, e.g. ``device``)."""
    from cl_bench.engine.runner import RunRequest

    return [
        RunRequest(
            methods=list(entry["methods"]),
            scenario=entry.get("scenario", "fmnist"),
            seeds=list(entry.get("seeds", [1993])),
            backbone=entry.get("backbone"),  # None: the scenario's default
            protocol=entry.get("protocol", "fair"),
            weights=entry.get("weights"),
            image_size=entry.get("image_size"),
            precision=entry.get("precision", "auto"),
            sets=sets,
            sweep=swept_items(list(entry.get("sets", []))),
            out=out,
            progress=progress,
            threads=suite.get("threads"),
            **common,
        )
        for entry in suite["runs"]
        for sets in expand_sets(list(entry.get("sets", [])))
    ]


def suite_keys(suite: dict) -> list[str]:
    """``<entry>/<method>`` for every run of the suite: the baseline's keys."""
    return [f"{entry['name']}/{method}" for entry in suite["runs"] for method in entry["methods"]]
