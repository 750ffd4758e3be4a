"""``cl-bench status``: every run of a results folder as done / stale / running / failed
/ invalid / pending, from the folder alone.

Runs come from the grids the folder records (what was planned) and from the
files beside them (results, failure records, locks); the state of each is its
files plus a lock probe, so no data, backbone or scheduler is needed and the
answer is the same on a laptop and a SLURM login node.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cl_bench.errors import UserError
from cl_bench.reporting import scheduler
from cl_bench.store import results
from cl_bench.store.records import InvalidResult, Result
from cl_bench.text_table import text_table

STATES = ("done", "stale", "running", "failed", "invalid", "pending")
SHOWN_IF_ANY = ("stale", "invalid")  # in the summary line only when there are some
DETAIL_WIDTH = 160


@dataclass
class RunState:
    scenario: str
    method: str
    seed: str
    config: str
    state: str
    detail: str


def known_runs(out: Path) -> list[Path]:
    """Planned runs plus any run with a file in the folder (older folders have no grid)."""
    runs = set(results.planned(out))
    for suffix in ("", ".failed", ".lock"):
        runs.update(
            p.with_name(p.name.removesuffix(suffix)) for p in results.find(out, f"*.json{suffix}")
        )
    return sorted(runs)


def state_of(path: Path) -> tuple[str, str]:
    """(state, detail) of one run. Done wins over everything (a success removes its
    failure record, but a crash in between may leave it); a run being computed now
    is running even if an earlier attempt failed. A result file that is not a valid
    record is invalid (the next run recomputes it), unless a later attempt failed. A
    valid result of other code or packages is stale (the next run recomputes it), unless
    it is being computed again now."""
    invalid = stale = None
    try:
        result = Result.from_file(path)
        numbers = f"avg {result.avg_acc:.2f}  last {result.last_acc:.2f}"
        if result.config_source:
            numbers += f"  from {result.config_source}"
        why = result.staleness()
        if not why:
            return "done", numbers
        stale = f"{'; '.join(why)} ({numbers})"
    except FileNotFoundError:
        pass
    except InvalidResult as e:
        invalid = str(e)
    lock = results.probe_lock(path)
    if lock and lock.held:
        return "running", results.held_by(lock.holder)
    if stale is not None:
        return "stale", stale
    failure = results.read_failure(path)
    if failure:
        return "failed", failure.get("error", {}).get("last_line", "(no error line)")
    if invalid is not None:
        return "invalid", invalid
    if lock:
        holder = lock.holder or {}
        said = scheduler.ended(holder["job"]) if holder.get("job") else None
        return "pending", (
            f"interrupted: started {holder.get('since', '?')} on "
            f"{holder.get('host', '?')}, ended without a result" + (f"; {said}" if said else "")
        )
    return "pending", ""


def collect(out: Path) -> list[RunState]:
    out = Path(out)
    if not out.is_dir():
        raise UserError(
            f'No results folder "{out}". Give the folder that `cl-bench run --out` '
            "wrote to (default: results)."
        )
    rows = []
    for path in known_runs(out):
        state, detail = state_of(path)
        seed, _, config = path.stem.partition("-")
        rows.append(
            RunState(path.parent.parent.name, path.parent.name, seed, config, state, detail)
        )
    return sorted(
        rows, key=lambda r: (r.scenario, r.method, int(r.seed) if r.seed.isdigit() else 0, r.config)
    )


def summary_line(rows: list[RunState]) -> str:
    counts = {s: sum(r.state == s for r in rows) for s in STATES}
    return f"{len(rows)} runs: " + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n or s not in SHOWN_IF_ANY
    )


def render(rows: list[RunState]) -> str:
    """A table (one row per run) and the one-line summary."""
    if not rows:
        return summary_line(rows)
    table = [("scenario", "method", "seed", "config", "state", "detail")]
    table += [
        (
            r.scenario,
            r.method,
            r.seed,
            r.config,
            r.state,
            r.detail if len(r.detail) <= DETAIL_WIDTH else r.detail[: DETAIL_WIDTH - 3] + "...",
        )
        for r in rows
    ]
    return "\n".join([*text_table(table, rule=False, free_last=True), summary_line(rows)])
