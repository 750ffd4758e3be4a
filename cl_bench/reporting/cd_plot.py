"""The critical-difference diagram of a report (Demšar, JMLR 7, 2006): the average rank
of each method across scenarios on an axis (1, the best, at the left), the critical
difference as a bar of its length, and a thick line under every group of methods whose
average ranks lie within it of each other."""

from __future__ import annotations

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from cl_bench.reporting.plots import DPI, FIGSIZE, Plot, slug


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


def diagram(average: pd.Series, cd: float, title: str, n: int) -> Plot:
    """The diagram of ``average`` (label -> average rank) with critical difference
    ``cd`` over ``n`` scenarios."""
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    order = average.sort_values(kind="stable")
    k = len(order)
    half = (k + 1) // 2
    margin = max(k - 1, 1) / 2  # the rank axis takes the middle half, labels the sides
    ax.set_xlim(1 - margin, k + margin)
    ax.set_ylim(max(half, k - half) + 1, -2.2)
    ax.axis("off")
    ax.hlines(0, 1, k, color="black", linewidth=1)
    for r in range(1, k + 1):
        ax.vlines(r, -0.15, 0, color="black", linewidth=1)
        ax.text(r, -0.3, str(r), ha="center", va="bottom", fontsize=9)
    ax.hlines(-1.4, 1, 1 + cd, color="black", linewidth=1.5)
    ax.vlines([1, 1 + cd], -1.55, -1.25, color="black", linewidth=1.5)
    ax.text(1 + cd / 2, -1.6, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=9)
    for i, (label, rank) in enumerate(order.items()):
        left = i < half
        y = (i + 1) if left else (k - i)
        edge = 1 - margin * 0.1 if left else k + margin * 0.1
        ax.plot([rank, rank, edge], [0, y, y], color="black", linewidth=0.8)
        ax.text(
            edge + (-0.02 if left else 0.02) * margin,
            y,
            f"{label} ({rank:.2f})" if left else f"({rank:.2f}) {label}",
            ha="right" if left else "left",
            va="center",
            fontsize=8,
        )
    for level, (low, high) in enumerate(groups(order, cd)):
        y = 0.35 + 0.25 * level
        ax.hlines(y, low - 0.05, high + 0.05, color="black", linewidth=3)
    ax.set_title(f"{title}: average rank over {n} scenarios (1: best)", fontsize=10)
    return Plot(f"critical-difference-{slug(title)}", f"Critical difference, {title}", fig)
