"""Accuracy regression gate: run a suite, compare with a committed baseline.

A suite (``benchmarks/<suite>.yaml``) is a list of entries, each one
``cl-bench run`` invocation (scenario, backbone, methods, seeds, --set
values). A result is keyed ``<entry>/<method>``; the baseline file holds per
key and metric the value, a tolerance and the provenance of the numbers.
A drop by more than the tolerance, or a key the run did not produce, fails
the check; an improvement beyond tolerance is reported so that the baseline
is raised on purpose (``--update-baseline``).
"""

from __future__ import annotations

import json
import math
import shlex
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cl_bench.cards import config, places, sources
from cl_bench.cards.places import read_yaml
from cl_bench.commands.suite_entries import check_entries
from cl_bench.errors import UserError
from cl_bench.store import results
from cl_bench.store.records import Result
from cl_bench.text_table import text_table

METRICS = ("avg_acc", "last_acc")


@dataclass
class Row:
    key: str
    metric: str
    baseline: float | None
    now: float | None
    tolerance: float
    base_in: str = "?"  # "<cpu capability>/<precision>" the baseline value was measured in
    now_in: str = "?"

    @property
    def ran_in(self) -> str:
        """Where each side ran: one ``AVX2/fp32`` when both agree."""
        if self.base_in == self.now_in or self.baseline is None or self.now is None:
            return self.now_in if self.now is not None else self.base_in
        return f"{self.base_in} -> {self.now_in}"

    @property
    def elsewhere(self) -> bool:
        """The baseline value was measured under another CPU capability or precision."""
        return self.baseline is not None and self.now is not None and self.base_in != self.now_in

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.now is None:
            return None
        return self.now - self.baseline

    @property
    def status(self) -> str:
        if self.now is None:
            return "MISSING"
        if self.baseline is None:
            return "NEW"
        if self.delta < -self.tolerance:
            return "DROP"
        if self.delta > self.tolerance:
            return "IMPROVED"
        return "ok"


def load_suite(name: str) -> dict:
    found = config.card_index()["suite"].get(name)
    if found is None:
        raise UserError(
            f'Unknown suite "{name}"; suites: '
            f"{', '.join(sorted(config.card_index()['suite']))} (card files with a "
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
    from cl_bench.engine.runner import RunRequest, execute, preflight
    from cl_bench.packages import recorded

    measured = Measured()
    reqs = [
        RunRequest(
            methods=list(entry["methods"]),
            scenario=entry.get("scenario", "fmnist"),
            seeds=list(entry.get("seeds", [1993])),
            backbone=entry.get("backbone"),  # None: the scenario's default
            protocol=entry.get("protocol", "fair"),
            weights=entry.get("weights"),
            image_size=entry.get("image_size"),
            precision=entry.get("precision", "auto"),
            sets=list(entry.get("sets", [])),
            out=out,
            progress=progress,
            threads=suite.get("threads"),
        )
        for entry in suite["runs"]
    ]
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


def cpu_capability() -> str:
    """The instruction set torch's CPU kernels dispatch to ("AVX2", "AVX512", ...). Full
    fine-tuning gives the same numbers on every CPU of one capability, not across them
    (the reduction order of the kernels differs), so a baseline may hold a value per
    capability (``by_cpu``) beside the value of the CPU that made it."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def expected(base: dict, cpu: str, made_on: str) -> tuple[float, str]:
    """A baseline metric's value for a CPU of capability ``cpu``, and the capability it
    was measured on (``made_on``: that of the baseline's main values)."""
    by_cpu = base.get("by_cpu", {})
    return (by_cpu[cpu], cpu) if cpu in by_cpu else (base["value"], made_on)


def provenance(baseline: dict) -> dict:
    """The baseline's provenance; an absent or malformed one says nothing (it only
    annotates the comparison, never decides it)."""
    found = baseline.get("provenance")
    return found if isinstance(found, dict) else {}


def baseline_precision(baseline: dict, key: str, suite: dict | None) -> str:
    """The precision a baseline key was measured in: recorded in its provenance since
    baselines record it, else the one its suite entry pins (``auto`` tells nothing)."""
    recorded = provenance(baseline).get("precision")
    if isinstance(recorded, dict) and isinstance(recorded.get(key), str):
        return recorded[key]
    entry = next((e for e in (suite or {}).get("runs", []) if key.startswith(f"{e['name']}/")), {})
    pinned = entry.get("precision", "auto")
    return pinned if isinstance(pinned, str) and pinned != "auto" else "?"


def compare(
    baseline: dict,
    measured: dict[str, dict[str, float]] | Measured,
    tolerance: float | None,
    cpu: str | None = None,
    suite: dict | None = None,
) -> list[Row]:
    """One row per run and metric; ``cpu`` (default: this machine's capability) picks a
    metric's ``by_cpu`` value where the baseline has one. Each row says where each side
    ran (capability/precision): a value from another capability or precision is still
    compared with the tolerance, and the table shows that it was."""
    cpu = cpu or cpu_capability()
    if not isinstance(measured, Measured):
        measured = Measured(values=measured)
    made_on = str(provenance(baseline).get("cpu_capability", "?"))
    base_devices = provenance(baseline).get("device_by_key")
    base_devices = base_devices if isinstance(base_devices, dict) else {}
    rows = []
    entries = baseline.get("metrics", {})
    for key in sorted(set(entries) | set(measured.values)):
        base_precision = baseline_precision(baseline, key, suite)
        now_device = measured.device.get(key, "cpu")
        now_in = f"{cpu if now_device == 'cpu' else now_device}/{measured.precision.get(key, '?')}"
        for metric in METRICS:
            base = entries.get(key, {}).get(metric)
            tol = tolerance if tolerance is not None else (base or {}).get("tolerance", 1.0)
            value, base_cpu = (None, "?") if base is None else expected(base, cpu, made_on)
            base_device = str(base_devices.get(key, "cpu"))
            base_where = base_cpu if base_device == "cpu" else base_device
            rows.append(
                Row(
                    key,
                    metric,
                    value,
                    measured.values.get(key, {}).get(metric),
                    tol,
                    f"{base_where}/{base_precision}",
                    now_in,
                )
            )
    return rows


def environment_notes(rows: list[Row], baseline: dict, measured: Measured) -> list[str]:
    """Why values may differ besides the code: rows measured under another capability
    or precision, and packages whose versions differ from the baseline's."""
    from cl_bench.packages import describe, differing, recorded

    notes = []
    across = [r for r in rows if r.elsewhere and ("cuda" in r.base_in) != ("cuda" in r.now_in)]
    if across:
        notes.append(
            f"{len(across)} value(s) were measured on a GPU and compared with a CPU "
            "baseline, or the other way round: GPU kernels round differently, so a "
            "difference within the tolerance may be the device alone; for a gate on "
            "GPU numbers, keep a baseline made on that GPU (--update-baseline "
            "--baseline FILE there)."
        )
    elsewhere = [r for r in rows if r.elsewhere]
    if elsewhere:
        where = sorted({r.ran_in for r in elsewhere})
        notes.append(
            f"{len(elsewhere)} baseline value(s) were measured under another CPU "
            f"capability or precision ({'; '.join(where)}; capability as torch "
            "dispatches, precision of the backbone passes): they are compared with "
            "their tolerance, and a difference within it may be rounding alone."
        )
    diff = differing([recorded(provenance(baseline)), measured.packages])
    if diff:
        notes.append(
            f"Package versions differ from the baseline's (baseline / now, in "
            f"sorted order): {describe(diff)}. A moved number may come from them; "
            "the locked environment (requirements/lock.txt) avoids this."
        )
    return notes


def table(rows: list[Row]) -> str:
    def num(v: float | None, sign: bool = False) -> str:
        if v is None:
            return "-"
        v = round(v, 2) + 0.0  # no "-0.00"
        return f"{v:+.2f}" if sign else f"{v:.2f}"

    body = [("run / method", "metric", "baseline", "now", "delta", "tol", "status", "ran in")]
    body += [
        (
            r.key,
            r.metric,
            num(r.baseline),
            num(r.now),
            num(r.delta, True),
            f"{r.tolerance:.2f}",
            r.status,
            r.ran_in,
        )
        for r in rows
    ]
    return "\n".join(text_table(body, right=range(2, 6)))


def suite_keys(suite: dict) -> list[str]:
    """``<entry>/<method>`` for every run of the suite: the baseline's keys."""
    return [f"{entry['name']}/{method}" for entry in suite["runs"] for method in entry["methods"]]


def default_baseline(name: str, writing: bool) -> Path:
    """A suite's baseline when --baseline is not given: a built-in suite's is the
    package's (``results/baselines/`` of a checkout); another suite's is
    ``baselines/<suite>.json`` beside the suite's file. An installed package's own
    baseline is read, never rewritten."""
    found = config.card_index()["suite"][name]
    if found.origin != sources.BUILTIN:
        return found.path.parent / "baselines" / f"{name}.json"
    if writing and places.CHECKOUT is None:
        raise UserError(
            f"The baseline of suite {name} is part of the installed cl-bench "
            f"({places.BASELINES_DIR}) and is not rewritten; give the file to "
            "write with --baseline PATH (and compare with it the same way)."
        )
    return places.BASELINES_DIR / f"{name}.json"


def finite_number(value: object) -> bool:
    """A JSON number the gate can compare with. Not a bool (``true`` is 1 to Python), not
    NaN (every comparison with NaN is false, so a NaN baseline passes as "ok") and not
    infinite (a tolerance of Infinity lets any drop pass)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_tolerance(value: float) -> None:
    """``--tolerance``: refused before the suite runs, as a tolerance in the file is. A
    negative one would report every metric as a drop, ``inf`` or ``nan`` none."""
    if not finite_number(value) or value < 0:
        raise UserError(
            f"--tolerance {value}: a tolerance is the accuracy points a metric "
            "may drop and must be a finite number of at least 0, e.g. "
            "--tolerance 1.0 (0: no drop at all)."
        )


def number_problems(metrics: dict) -> list[str]:
    """Every unusable number among the metrics :func:`compare` reads, of every key (a
    key the suite no longer runs is compared too): values and ``by_cpu`` values must be
    finite numbers, tolerances finite numbers >= 0."""

    def shown(value: object) -> str:
        text = json.dumps(value)
        return text if len(text) <= 24 else text[:21] + "..."

    found = []
    for key, entry in metrics.items():
        if not isinstance(entry, dict):
            found.append(f"{key} {shown(entry)} (not a mapping of metrics)")
            continue
        for m, base in ((m, entry[m]) for m in METRICS if m in entry):
            if not isinstance(base, dict):
                found.append(f"{key} {m} {shown(base)} (not a mapping with a value)")
                continue
            numbers = [("value", base.get("value"))]
            by_cpu = base.get("by_cpu", {})
            numbers += (
                [(f"by_cpu {cpu}", v) for cpu, v in by_cpu.items()]
                if isinstance(by_cpu, dict)
                else [("by_cpu", by_cpu)]
            )
            found += [f"{key} {m} {what} {shown(v)}" for what, v in numbers if not finite_number(v)]
            if "tolerance" in base and not (finite_number(tol := base["tolerance"]) and tol >= 0):
                found.append(f"{key} {m} tolerance {shown(tol)}")
    return found


def remake_command(suite: str, path: Path) -> str:
    """The command that writes suite ``suite``'s baseline to ``path``, with this
    command's ``--cards`` folders: the suite, or the cards it runs, may come from them."""
    cards = [
        f"--cards {shlex.quote(str(s.folder))}"
        for s in sources.extra_sources()
        if s.origin == "--cards"
    ]
    return " ".join(
        [
            "cl-bench check",
            *cards,
            f"--suite {shlex.quote(suite)}",
            f"--update-baseline --baseline {shlex.quote(str(path))}",
        ]
    )


def read_baseline(path: Path, suite: dict) -> dict:
    """The baseline, verified before the suite runs: it exists, is JSON, holds a value
    for every metric of every run of the suite, and every number in it is usable."""
    remake = f"`{remake_command(suite['name'], path)}`"
    fix = f"Recreate it with {remake}."
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"Baseline {path} does not exist. {fix}") from None
    except OSError as e:
        raise UserError(
            f"Baseline {path} cannot be read ({e.strerror or e}). Give a "
            f"readable file with --baseline, or recreate it with {remake}."
        ) from None
    except ValueError as e:
        raise UserError(f"Baseline {path} is not readable JSON ({e}). {fix}") from None
    metrics = data.get("metrics") if isinstance(data, dict) else None
    if not isinstance(metrics, dict):
        raise UserError(f"Baseline {path} has no `metrics` mapping. {fix}")
    lacking = [
        f"{key} {m}"
        for key in suite_keys(suite)
        for m in METRICS
        if not isinstance(metrics.get(key), dict)
        or not isinstance(metrics[key].get(m), dict)
        or "value" not in metrics[key][m]
    ]
    if lacking:
        raise UserError(
            f"Baseline {path} has no value for {', '.join(lacking[:4])}"
            f"{' ...' if len(lacking) > 4 else ''} of suite {suite['name']}. {fix}"
        )
    bad = number_problems(metrics)
    if bad:
        raise UserError(
            f"Baseline {path} holds numbers the gate cannot compare with: "
            f"{', '.join(bad[:4])}{' ...' if len(bad) > 4 else ''}. Every value "
            "must be a finite number (not true/false, a string, NaN or Infinity) "
            "and every tolerance a finite number of at least 0 (accuracy "
            f"points). Correct them, or recreate the file with {remake}."
        )
    return data


def new_baseline(suite: dict, measured: Measured, tolerance: float) -> dict:
    from cl_bench.engine.environment import git_commit, resolve_device, versions

    env = versions(resolve_device("auto"), places.CHECKOUT)
    return {
        "suite": suite["name"],
        "notes": {e["name"]: e["note"] for e in suite["runs"] if e.get("note")},
        "provenance": {
            "commit": git_commit(places.CHECKOUT),
            "date": time.strftime("%Y-%m-%d"),
            "torch": env["torch"],
            "timm": env["timm"],
            "avalanche": env["avalanche"],
            "device": env["device"],
            "platform": env["platform"],
            "cpu_capability": cpu_capability(),
            "precision": dict(sorted(measured.precision.items())),
            "device_by_key": dict(sorted(measured.device.items())),
            "packages": measured.packages or env["packages"],
        },
        "metrics": {
            key: {m: {"value": v, "tolerance": tolerance} for m, v in values.items()}
            for key, values in sorted(measured.values.items())
        },
    }


def write_baseline(path: Path, data: dict) -> None:
    results.write_atomic(path, data)
