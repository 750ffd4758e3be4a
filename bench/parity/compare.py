"""Side-by-side rows for bench/parity.md: cl-bench's result files against the
reference's log.

    python -m bench.parity.compare simplecil RESULTS_DIR pilot PILOT_STDOUT_LOG
    python -m bench.parity.compare ewc RESULTS_DIR avalanche AVALANCHE_JSON
    python -m bench.parity.compare ranpac RESULTS_DIR pilot-tasks PILOT_STDOUT_LOG

PILOT's log: per seed, a line ``seed: N`` (its argument dump) and after every
task a line ``CNN top1 curve: [...]`` (top-1 over the test images of all seen
classes, in percent, rounded to 2 decimals; the same definition as cl-bench's
``acc_seen``). The Avalanche reference (methods/ewc/reference_first_round.py) writes JSON: {seed:
curve}. Average = mean of the curve, last = its final value, first task = its
first value (after task 1 all seen classes are the first task's).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

NUMBER = re.compile(r"(-?\d+(?:\.\d+)?)\)?(?:,|\])")


def pilot_curves(log: Path) -> dict[int, list[float]]:
    """seed -> the last top-1 curve PILOT logged for it."""
    curves: dict[int, list[float]] = {}
    seed = None
    for line in log.read_text().splitlines():
        m = re.search(r"=> seed: (\d+)$", line)
        if m:
            seed = int(m.group(1))
        elif "CNN top1 curve:" in line and seed is not None:
            curves[seed] = [float(v) for v in NUMBER.findall(line.split("curve:", 1)[1])]
    return curves


def pilot_last_tasks(log: Path) -> dict[int, list[float]]:
    """seed -> the per-task accuracies of PILOT's last logged step (its ``CNN: {...}``
    line: one entry per block of ``increment`` classes, then 'old' and 'new')."""
    tasks: dict[int, list[float]] = {}
    seed = None
    for line in log.read_text().splitlines():
        m = re.search(r"=> seed: (\d+)$", line)
        if m:
            seed = int(m.group(1))
        elif "=> CNN: {" in line and seed is not None:
            tasks[seed] = [
                float(v)
                for v in re.findall(
                    r"'\d+-\d+': (?:np\.float64\()?"
                    r"(-?\d+(?:\.\d+)?)",
                    line,
                )
            ]
    return tasks


def ours_last_tasks(results: Path, method: str) -> dict[int, list[float]]:
    """seed -> the last row of our accuracy matrix (accuracy on each task's classes)."""
    out = {}
    for f in sorted((results / "runs").glob(f"*/{method}/*.json")):
        record = json.loads(f.read_text())
        out[int(record["seed"])] = [float(a) for a in record["acc_matrix"][-1]]
    return out


def task_rows(method: str, mine: dict[int, list[float]], ref: dict[int, list[float]]) -> list[str]:
    lines = [
        "| method | seed | ours, per task after the last | reference, per task after the "
        "last | largest difference |",
        "|---|---|---|---|---|",
    ]
    for seed in sorted(set(mine) & set(ref)):
        gap = max(abs(a - b) for a, b in zip(mine[seed], ref[seed], strict=True))
        lines.append(
            f"| {method} | {seed} | {', '.join(f'{v:.2f}' for v in mine[seed])} | "
            f"{', '.join(f'{v:.2f}' for v in ref[seed])} | {gap:.2f} |"
        )
    return lines


def ours(results: Path, method: str) -> dict[int, list[float]]:
    out = {}
    for f in sorted((results / "runs").glob(f"*/{method}/*.json")):
        record = json.loads(f.read_text())
        out[int(record["seed"])] = [float(a) for a in record["acc_seen"]]
    return out


def summary(curve: list[float]) -> tuple[float, float, float]:
    return sum(curve) / len(curve), curve[-1], curve[0]


def rows(method: str, mine: dict[int, list[float]], ref: dict[int, list[float]]) -> list[str]:
    lines = [
        "| method | seed | ours avg / last / first | reference avg / last / first | "
        "difference (ours - ref) avg / last / first | curves (ours; reference) |",
        "|---|---|---|---|---|---|",
    ]
    for seed in sorted(set(mine) | set(ref)):
        if seed not in mine or seed not in ref:
            lines.append(
                f"| {method} | {seed} | {'missing' if seed not in mine else ''} | "
                f"{'missing' if seed not in ref else ''} | | |"
            )
            continue
        a, b = summary(mine[seed]), summary(ref[seed])
        fmt = " / ".join
        lines.append(
            f"| {method} | {seed} | {fmt(f'{v:.2f}' for v in a)} | {fmt(f'{v:.2f}' for v in b)} | "
            f"{fmt(f'{x - y:+.2f}' for x, y in zip(a, b, strict=True))} | "
            f"{', '.join(f'{v:.2f}' for v in mine[seed])}; "
            f"{', '.join(f'{v:.2f}' for v in ref[seed])} |"
        )
    return lines


if __name__ == "__main__":
    method, results, kind, ref_path = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    if kind == "pilot-tasks":
        print(
            "\n".join(
                task_rows(method, ours_last_tasks(results, method), pilot_last_tasks(ref_path))
            )
        )
        sys.exit()
    if kind == "pilot":
        reference = pilot_curves(ref_path)
    else:
        reference = {int(k): v for k, v in json.loads(ref_path.read_text()).items()}
    print("\n".join(rows(method, ours(results, method), reference)))
