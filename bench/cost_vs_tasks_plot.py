"""The drawing of a cost-vs-tasks measurement (:mod:`bench.cost_vs_tasks`): per method,
its cost at each task of the longest stream it ran against the tasks seen so far, on
log-log axes (a method whose cost grows with the tasks rises; one that does not stays
flat), and the table of how far each method got on each stream length. The
documentation's Performance page shows both under the figure (``docs_build``);
``python -m bench.cost_vs_tasks_plot [JSON]`` writes the drawing beside the measurement."""

from __future__ import annotations

import argparse
import io
import itertools
import json
import math
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure

from bench import measurements

MB = 1e6
# (key of per_task, axis label, scale of the values): what each panel draws
PANELS = (
    ("train_s", "training seconds of the task", 1.0),
    ("peak_rss_bytes", "peak resident set above the run's start, MB (1 MB at least)", MB),
    ("stored_params", "parameters stored beyond the backbone", 1.0),
    ("gflops_per_image", "GFLOPs per test image (every backbone pass)", 1.0),
)


def longest(record: dict, method: str) -> dict | None:
    """The run of ``method`` with the most tasks done (the longer stream on a tie)."""
    runs = [r for r in record["runs"] if r["method"] == method and r.get("per_task")]
    runs = [r for r in runs if r["per_task"]["train_s"]]
    if not runs:
        return None
    return max(runs, key=lambda r: (len(r["per_task"]["train_s"]), r["tasks"]))


def series(run: dict, key: str, scale: float) -> list[float]:
    """The values of ``key`` per task, scaled; nothing (NaN) where a log axis has no place
    for them (0: a joint method trains once, before its first evaluation)."""
    values = run["per_task"][key]
    if key == "peak_rss_bytes":
        start = run.get("rss_start_bytes") or 0
        return [max((v or 0) - start, MB) / scale for v in values]
    return [v / scale if v else math.nan for v in values]


def figure(record: dict) -> Figure:
    methods = record["toy"]["methods"]
    fig = Figure(figsize=(11, 8.5))
    axes = fig.subplots(2, 2)
    colours = matplotlib.colormaps["tab20"].colors
    styles = itertools.cycle(["-", "--", "-.", ":"])
    for i, method in enumerate(methods):
        run = longest(record, method)
        if run is None:
            continue
        style = dict(
            color=colours[i % len(colours)], linestyle=next(styles), linewidth=1.4, marker="."
        )
        style["markersize"] = 4 if len(run["per_task"]["train_s"]) < 20 else 0
        for ax, (key, _, scale) in zip(axes.flat, PANELS, strict=True):
            y = series(run, key, scale)
            x = range(1, len(y) + 1)
            ax.plot(x, y, label=method, **style)
            if run["status"] != "done" and not math.isnan(y[-1]):  # stopped: where it ended
                ax.plot([len(y)], [y[-1]], marker="x", markersize=6, color=style["color"])
    for ax, (_, label, _) in zip(axes.flat, PANELS, strict=True):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tasks seen (one class each)")
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8, frameon=False)
    toy = record["toy"]
    fig.suptitle(
        f"Cost per task against the tasks seen: {toy['backbone']} ({toy['weights']}) at "
        f"{toy['image_size']} px, {toy['precision']}; x: where a run stopped, its time "
        "budget spent",
        fontsize=10,
    )
    fig.subplots_adjust(right=0.84, hspace=0.3, wspace=0.25)
    return fig


def svg(record: dict) -> str:
    """The drawing as SVG text, the same bytes for the same record (no date, fixed ids)."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "cost-vs-tasks", "svg.fonttype": "none"}):
        FigureCanvasSVG(figure(record)).print_svg(buffer, metadata={"Date": None})
    return buffer.getvalue()


def reached(run: dict) -> str:
    """One cell: how far a run got."""
    done = len((run.get("per_task") or {}).get("train_s") or [])
    if run["status"] == "done":
        return "done"
    if run["status"] == "stopped":
        return f"stopped at {done}"
    return f"{run['status']} at {done}" if done else run["status"]


def table(record: dict) -> tuple[list[str], list[list[str]]]:
    """Headers and rows: per method, how far it got on each stream length."""
    lengths = record["toy"]["lengths"]
    rows = []
    for method in record["toy"]["methods"]:
        by_length = {r["tasks"]: r for r in record["runs"] if r["method"] == method}
        rows.append(
            [method, *(reached(by_length[t]) if t in by_length else "not run" for t in lengths)]
        )
    return ["method", *(f"T = {t}" for t in lengths)], rows


def reasons(record: dict) -> list[str]:
    """Why a run was refused, failed or killed, one line each."""
    return [
        f"{r['method']} at T = {r['tasks']}: {r['status']}: {r['reason']}"
        for r in record["runs"]
        if r.get("reason")
    ]


def main(argv: list[str] | None = None) -> Path:
    """Write the drawing of a measurement (default: the newest cost-vs-tasks one) beside
    it, as ``<measurement>.svg``, and return its path."""
    parser = argparse.ArgumentParser(prog="python -m bench.cost_vs_tasks_plot")
    parser.add_argument("measurement", nargs="?", type=Path, help="a cost-vs-tasks JSON")
    args = parser.parse_args(argv)
    path = args.measurement
    if path is None:
        found = [m for m in measurements.load_all() if m.figure == "cost-vs-tasks"]
        path = max(found, key=lambda m: (m.date, m.path.name)).path
    drawn = path.with_suffix(".svg")
    drawn.write_text(svg(json.loads(path.read_text(encoding="utf-8"))), encoding="utf-8")
    return drawn


if __name__ == "__main__":
    print(main())
