"""A search's record, ``<out>/<scenario>/<method>/<study>/tune.json``: what was searched,
every trial (its settings, validation score, state, runs and time), the best trial and
the search's cost. Written atomically after every batch of trials, so an interrupted
search loses nothing it finished; checked whole when read back
(:func:`read_record`), since ``run --tuned`` takes its settings from it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from cl_bench.errors import UserError
from cl_bench.store.atomic import replace_atomically

RECORD = "tune.json"
SCHEMA = 1
OBJECTIVES = {"avg": "avg_acc", "last": "last_acc"}
KEYS = (
    "schema", "method", "scenario", "study", "objective", "validation", "seeds", "space",
    "sets", "setting", "trials_wanted", "trials", "best", "cost", "test_split_read",
)  # fmt: skip


def write_record(folder: Path, record: dict[str, Any]) -> Path:
    path = folder / RECORD
    replace_atomically(path, lambda f: f.write(json.dumps(record, indent=1, allow_nan=False)))
    return path


def best_trial(trials: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The complete trial with the highest value; the earliest among equals."""
    done = [t for t in trials if t["state"] == "complete"]
    return max(done, key=lambda t: (t["value"], -t["number"])) if done else None


def problems(record: object) -> list[str]:
    """What makes ``record`` not a complete, consistent search record ([] when none)."""
    if not isinstance(record, dict):
        return ["it is not a JSON object"]
    missing = [k for k in KEYS if k not in record]
    if missing:
        return [f"it lacks {', '.join(missing)}"]
    if record["schema"] != SCHEMA:
        return [f"its schema is {record['schema']!r}, not {SCHEMA}"]
    if record["test_split_read"] is not False:
        return ["it does not say that the search left the test split unread"]
    out = []
    trials = record["trials"]
    if not isinstance(trials, list) or not all(isinstance(t, dict) for t in trials):
        return ["its trials are not a list of objects"]
    keys = {d["key"] for d in record["space"]}
    for t in trials:
        if t.get("state") == "complete":
            value = t.get("value")
            if not isinstance(value, int | float) or not math.isfinite(value):
                out.append(f"trial {t.get('number')} is complete without a finite value")
            if set(t.get("params", {})) != keys:
                out.append(f"trial {t.get('number')} does not set exactly the searched settings")
    best = best_trial([t for t in trials if t.get("state") == "complete"]) if not out else None
    recorded = record["best"]
    if not out and (best is None) != (recorded is None):
        out.append("its best trial does not match its trials")
    elif best is not None and (
        recorded["number"] != best["number"] or recorded["params"] != best["params"]
    ):
        out.append(
            f"its best trial is {recorded['number']}, but trial {best['number']} scores higher"
        )
    return out


def read_record(path: Path) -> dict[str, Any]:
    """The search record at ``path``, checked; a damaged one is refused with the fix."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        record, found = None, [f"it cannot be read ({e})"]
    else:
        found = problems(record)
    if found:
        raise UserError(
            f"{path} is not a valid search record: {found[0]}. Run the `cl-bench tune` command "
            "that made it again (finished trials are reused), or delete its folder."
        )
    return record


def records_of(out: Path, scenario: str, method: str) -> list[tuple[Path, dict[str, Any]]]:
    """Every search record of ``method`` on ``scenario`` under ``out``, checked, newest
    first."""
    paths = sorted((out / scenario / method).glob(f"*/{RECORD}"))
    found = [(p, read_record(p)) for p in paths]
    return sorted(found, key=lambda pr: pr[1]["cost"]["updated"], reverse=True)
