"""Plots for ``cl-bench report``: accuracy curves, cost vs accuracy, accuracy matrices,
protocol sensitivity.

Figures are built with matplotlib's object API on the Agg canvas (no pyplot, no global
backend switch) at a fixed size and dpi, so every PNG is ``PIXELS`` and reports are
reproducible. Each configuration keeps one colour from seaborn's colour-blind palette
*and* one marker and line style in every figure, so plots also read in greyscale.
"""

from __future__ import annotations

import io
import re
import textwrap
from dataclasses import dataclass

import matplotlib
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

FIGSIZE, DPI = (7.2, 4.5), 100
PIXELS = (720, 450)  # width, height of every PNG
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":")
HATCHES = ("", "//")


@dataclass
class Plot:
    """A figure and the file stem and caption it is published under."""

    name: str
    caption: str
    figure: Figure


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _figure(ncols: int = 1) -> tuple[Figure, list]:
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(np.atleast_1d(fig.subplots(1, ncols)))


def _style(i: int) -> dict:
    colour = sns.color_palette("colorblind")[i % 10]
    return {
        "color": colour,
        "marker": MARKERS[i % len(MARKERS)],
        "linestyle": LINESTYLES[i % len(LINESTYLES)],
    }


def render(fig: Figure, fmt: str) -> bytes:
    """PNG or SVG bytes, without dates or random ids, so unchanged data gives unchanged
    files."""
    buf = io.BytesIO()
    metadata = {"Software": None} if fmt == "png" else {"Date": None}
    with matplotlib.rc_context({"svg.hashsalt": "cl-bench"}):
        fig.savefig(buf, format=fmt, dpi=DPI, metadata=metadata)
    return buf.getvalue()


def _mean_std(rows: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(rows, dtype=float)
    std = a.std(axis=0, ddof=1) if len(a) > 1 else np.zeros(a.shape[1])
    return a.mean(axis=0), std


def curve(scenario: str, runs: pd.DataFrame, table: pd.DataFrame) -> Plot:
    """Accuracy on all seen classes after each task: mean line, +-1 std band."""
    fig, (ax,) = _figure()
    for i, row in enumerate(table.itertuples()):
        own = runs[runs["config"] == row.config]
        mean, std = _mean_std(own["acc_seen"].tolist())
        x = own["seen_classes"].iloc[0]
        style = _style(i)
        ax.plot(x, mean, label=f"{row.label} (n={row.n})", **style)
        ax.fill_between(
            x,
            np.clip(mean - std, 0, 100),
            np.clip(mean + std, 0, 100),
            color=style["color"],
            alpha=0.2,
            lw=0,
        )
    ax.set(xlabel="classes seen", ylabel="accuracy on seen classes (%)", title=scenario)
    ax.set_xticks(x)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return Plot(
        f"curve_{slug(scenario)}",
        f"{scenario}: accuracy on the seen classes after each task (mean ± std over seeds)",
        fig,
    )


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats (less or equal x, higher y), by x."""
    order = np.lexsort((-y, x))
    front, best = [], -np.inf
    for i in order:
        if y[i] > best:
            front.append(i)
            best = y[i]
    return np.asarray(front, dtype=int)


def _short(value: float, _pos: int | None = None) -> str:
    """Tick label: 2k, 1.5M, 0.77."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def _log_x(ax, x: np.ndarray) -> None:
    """Log x padded by 2x each side, so even a narrow range (0.768 vs 0.772 GFLOPs) has
    1-2-5 ticks; symlog when a method adds nothing (0), which log cannot place."""
    positive = x[x > 0]
    low, high = (positive.min(), positive.max()) if len(positive) else (1.0, 1.0)
    if (x <= 0).any():
        ax.set_xscale("symlog", linthresh=low / 2)
        ax.set_xlim(0, high * 2)
    else:
        ax.set_xscale("log")
        ax.set_xlim(low / 2, high * 2)
        if high / low < 25:
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(_short))
    ax.xaxis.set_minor_formatter(NullFormatter())


def cost(scenario: str, table: pd.DataFrame) -> Plot:
    """Last accuracy vs added parameters per task and vs inference GFLOPs per image."""
    fig, axes = _figure(ncols=2)
    y, yerr = table["last_acc_mean"].to_numpy(), table["last_acc_std"].fillna(0).to_numpy()
    for ax, key, xlabel in (
        (axes[0], "added_params_mean", "added parameters per task"),
        (axes[1], "gflops_mean", "inference GFLOPs per image"),
    ):
        x = table[key].to_numpy(dtype=float)
        for i, label in enumerate(table["label"]):
            style = _style(i) | {"linestyle": "none"}
            ax.errorbar(x[i], y[i], yerr=yerr[i], label=label, capsize=3, ms=7, **style)
        front = pareto_front(x, y)
        ax.plot(x[front], y[front], color="0.4", ls=":", drawstyle="steps-post", zorder=0)
        ax.scatter(
            x[front], y[front], s=260, facecolors="none", edgecolors="0.2", label="Pareto front"
        )
        _log_x(ax, x)
        ax.set(xlabel=xlabel + " (log)", ylabel="last accuracy (%)")
        ax.grid(alpha=0.3)
    fig.legend(
        *axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize="small"
    )
    fig.suptitle(scenario)
    return Plot(
        f"cost_{slug(scenario)}",
        f"{scenario}: last accuracy vs added parameters "
        "per task and vs inference GFLOPs per image (log x; ringed: Pareto front)",
        fig,
    )


def matrix(scenario: str, row, runs: pd.DataFrame) -> Plot:
    """Mean accuracy matrix A[i][j] over seeds (row i: after task i; column j: task j)."""
    own = runs[runs["config"] == row.config]["acc_matrix"].tolist()
    t = len(own[0])
    a = np.full((len(own), t, t), np.nan)
    for s, m in enumerate(own):
        for i, r in enumerate(m):
            a[s, i, : len(r)] = r
    mean = a.mean(axis=0)  # every seed has the same triangle; NaN above it stays NaN
    fig, (ax,) = _figure()
    ticks = [str(k + 1) for k in range(t)]
    sns.heatmap(
        mean,
        ax=ax,
        mask=np.isnan(mean),
        annot=True,
        fmt=".1f",
        vmin=0,
        vmax=100,
        cmap="cividis",
        square=True,
        xticklabels=ticks,
        yticklabels=ticks,
        cbar_kws={"label": "accuracy (%)"},
        annot_kws={"fontsize": "small"},
    )
    ax.tick_params(axis="y", labelrotation=0)
    ax.set(
        xlabel="evaluated on task",
        ylabel="after training task",
        title=f"{scenario}: {row.label} (n={row.n})",
    )
    return Plot(
        f"matrix_{slug(scenario)}_{slug(row.label)}",
        f"{scenario}, {row.label}: accuracy matrix, mean over seeds",
        fig,
    )


def protocol(scenario: str, runs: pd.DataFrame, table: pd.DataFrame) -> Plot | None:
    """Average and last accuracy of each method under each protocol it was run with; None
    when no method was run under more than one protocol."""
    configs = runs.drop_duplicates("config")
    knobs = ["protocol_label"]  # the declared protocol settings and the test order, as named
    varied = [
        cfg["config"].tolist()
        for _, cfg in configs.groupby(["method", "backbone", "weights"])
        if cfg[knobs].astype(str).drop_duplicates().shape[0] > 1
    ]
    if not varied:
        return None
    part = table[table["config"].isin([c for group in varied for c in group])]
    fig, (ax,) = _figure()
    pos = np.arange(len(part))
    for k, (key, name) in enumerate((("avg_acc", "avg acc"), ("last_acc", "last acc"))):
        ax.barh(
            pos + (k - 0.5) * 0.4,
            part[f"{key}_mean"],
            height=0.4,
            xerr=part[f"{key}_std"].fillna(0),
            capsize=3,
            label=name,
            hatch=HATCHES[k],
            color=sns.color_palette("colorblind")[k],
            edgecolor="black",
        )
    ax.set_yticks(
        pos,
        [
            textwrap.fill(f"{label} (n={n})", 28)
            for label, n in zip(part["label"], part["n"], strict=True)
        ],
    )
    ax.invert_yaxis()
    ax.set(xlabel="accuracy (%)", xlim=(0, 100), title=f"{scenario}: protocol sensitivity")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, axis="x")
    return Plot(
        f"protocol_{slug(scenario)}",
        f"{scenario}: the same method under different evaluation protocols",
        fig,
    )


def figures(runs: pd.DataFrame, table: pd.DataFrame) -> list[Plot]:
    """Every plot of one scenario: ``runs`` and ``table`` hold that scenario only."""
    scenario = table["scenario"].iloc[0]
    plots = [curve(scenario, runs, table), cost(scenario, table)]
    plots += [matrix(scenario, row, runs) for row in table.itertuples()]
    sensitivity = protocol(scenario, runs, table)
    return plots + ([sensitivity] if sensitivity else [])
