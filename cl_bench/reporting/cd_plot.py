"""The critical-difference diagram of a report (Demšar, JMLR 7, 2006): the average rank
of each method across scenarios on an axis (1, the best, at the left), the critical
difference as a bar of its length, and a thick line under every group of methods whose
average ranks lie within it of each other.

The diagram takes the report's figure size and dpi (:class:`~cl_bench.reporting.plots.Look`).
Methods are named on both sides, the better half on the left, one row each below the
group lines, so no line crosses a name; the names' type shrinks with the rows a figure
of that height must hold, and constrained layout keeps every name inside the figure."""

from __future__ import annotations

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import offset_copy

from cl_bench.reporting.plots import LOOK, Look, Plot, slug, title

GROUP_STEP = 0.3  # rows between two group lines
TOP = -2.4  # the CD bar and its label above the rank axis


def groups(average: pd.Series, cd: float) -> list[tuple[float, float]]:
    """(lowest, highest) average rank of each maximal run of methods, in rank order,
    whose ranks differ by less than ``cd``; runs of one method are left out."""
    values = sorted(average)
    spans = []
    for i, low in enumerate(values):
        j = max(k for k in range(i, len(values)) if values[k] - low < cd)
        if j > i and not any(a <= low and values[j] <= b for a, b in spans):
            spans.append((low, values[j]))
    return spans


def _font(look: Look, rows: float, chars: int) -> float:
    """Points of the names' type, at most 9 and at least 5: 60 % of a row's height (about
    70 % of the figure's height is the diagram), and small enough that the longest name
    of each side (``chars`` characters together, about 0.55 em each) leaves 40 % of the
    figure's width to the rank axis."""
    row = 0.7 * look.size[1] * 72 / rows
    wide = 0.6 * look.size[0] * 72 / (0.55 * max(chars, 1))
    return max(5.0, min(9.0, 0.6 * row, wide))


def _thin(fig: Figure, numbers: list) -> None:
    """Leave every 2nd (5th, 10th, ...) rank number, from 1, where all of them would touch
    each other on a narrow axis."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in numbers]
    gap = min((b.x0 - a.x1 for a, b in zip(boxes, boxes[1:], strict=False)), default=1.0)
    if gap > 2:
        return
    width = max(b.width for b in boxes) + 3
    pitch = boxes[1].x0 - boxes[0].x0
    step = next((s for s in (2, 5, 10, 20, 50) if s * pitch >= width), 100)
    for r, text in enumerate(numbers):
        text.set_visible(r % step == 0)


def diagram(average: pd.Series, cd: float, metric: str, n: int, look: Look = LOOK) -> Plot:
    """The diagram of ``average`` (label -> average rank) with critical difference
    ``cd`` over ``n`` scenarios for ``metric`` (its title), at ``look``'s size and dpi."""
    fig = Figure(figsize=look.size, dpi=look.dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    order = average.sort_values(kind="stable")
    k = len(order)
    half = (k + 1) // 2
    spans = groups(order, cd)
    first = 0.6 + GROUP_STEP * len(spans)  # the first row of names, below the group lines
    last = first + max(half, k - half) - 1
    shown = [f" {label} ({rank:.2f}) " for label, rank in order.items()]
    chars = max(map(len, shown[:half])) + max(map(len, shown[half:]), default=0)
    font = _font(look, last - TOP + 1, chars)
    right = max(k, 1 + cd)  # a critical difference longer than the axis is drawn whole
    ax.set_xlim(1 - 0.04 * (right - 1 or 1), right + 0.04 * (right - 1 or 1))
    ax.set_ylim(last + 0.6, TOP)
    ax.axis("off")
    ax.hlines(0, 1, k, color="black", linewidth=1)
    ax.vlines(range(1, k + 1), -0.15, 0, color="black", linewidth=1)
    numbers = [
        ax.text(r, -0.3, str(r), ha="center", va="bottom", fontsize=font) for r in range(1, k + 1)
    ]
    ax.hlines(-1.5, 1, 1 + cd, color="black", linewidth=1.5)
    ax.vlines([1, 1 + cd], -1.65, -1.35, color="black", linewidth=1.5)
    ax.text(1 + cd / 2, -1.75, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=font)
    for level, (low, high) in enumerate(spans):
        y = 0.3 + GROUP_STEP * level
        ax.hlines(y, low - 0.05, high + 0.05, color="black", linewidth=3)
    for i, (label, rank) in enumerate(order.items()):
        left = i < half
        y = first + (i if left else k - 1 - i)
        edge = 1 - 0.03 * (right - 1 or 1) if left else k + 0.03 * (right - 1 or 1)
        ax.plot([rank, rank, edge], [0, y, y], color="black", linewidth=0.8)
        ax.text(
            edge,
            y,
            f"{label} ({rank:.2f})" if left else f"({rank:.2f}) {label}",
            ha="right" if left else "left",
            va="center",
            fontsize=font,
            transform=offset_copy(ax.transData, fig, x=-3 if left else 3, units="points"),
        )
    title(fig, f"{metric}: average rank over {n} scenarios (1: best)")
    if k > 1:
        _thin(fig, numbers)
    return Plot(f"critical-difference-{slug(metric)}", f"Critical difference, {metric}", fig)
