"""A suite's baseline file: where it is, read and verified before the suite runs (every
key and metric present, every number usable), and written anew with its provenance
(``--update-baseline``)."""

from __future__ import annotations

import json
import math
import shlex
import time
from pathlib import Path

from cl_bench.cards import catalogue, places, sources
from cl_bench.errors import UserError
from cl_bench.gate.compare import cpu_capability
from cl_bench.gate.suite import METRICS, Measured, suite_keys
from cl_bench.store import results


def default_baseline(name: str, writing: bool) -> Path:
    """A suite's baseline when --baseline is not given: a built-in suite's is the
    package's (``results/baselines/`` of a checkout); another suite's is
    ``baselines/<suite>.json`` beside the suite's file. An installed package's own
    baseline is read, never rewritten."""
    found = catalogue.card_index()["suite"][name]
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
