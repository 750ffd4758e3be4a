"""Plots for ``cl-bench report``: accuracy curves, cost vs accuracy, forgetting and
backward transfer, accuracy matrices, protocol sensitivity.

Figures are built with matplotlib's object API on the Agg canvas (no pyplot, no global
backend switch) under constrained layout at the size and dpi of a :class:`Look`, so
every PNG of one look has the same pixel size and reports are reproducible. Legends
stand outside the axes on the figure's right, inside the figure, so neither a legend
nor a line is hidden; titles are wrapped to the figure's width. Each configuration
keeps one colour from seaborn's colour-blind palette *and* one marker and line style in
every figure, so plots also read in greyscale. Legends name methods by their card
titles; every title names the backbone and its weights (:mod:`captions`).
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
from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    LogLocator,
    NullFormatter,
    NullLocator,
)

from cl_bench.errors import UserError
from cl_bench.reporting.captions import Context, titled

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":")
HATCHES = ("", "//")
LEGEND_WIDTH = 30  # characters of a legend entry's line
ZERO_SHADE = "0.93"  # the band of methods that add no parameters, left of the log range


@dataclass(frozen=True)
class Look:
    """Figure size in inches (width, height) and dots per inch of the raster files."""

    size: tuple[float, float] = (7.2, 4.5)
    dpi: int = 150

    @property
    def pixels(self) -> tuple[int, int]:
        """(width, height) of a PNG of this look."""
        return round(self.size[0] * self.dpi), round(self.size[1] * self.dpi)


SIZES = (1.0, 40.0)  # inches a side may take
DPIS = (20, 1200)


def look(size: str | tuple[float, float] | None = None, dpi: int | None = None) -> Look:
    """A :class:`Look` from ``size`` ("6.4x4" or (6.4, 4.0) inches; None: the default's)
    and ``dpi`` (None: the default's); anything else is a UserError."""
    default = Look()
    if size is None:
        inches = default.size
    else:
        parts = size.lower().split("x") if isinstance(size, str) else list(size)
        try:
            inches = tuple(float(p) for p in parts)
        except (TypeError, ValueError):
            inches = ()
        if len(inches) != 2 or not all(SIZES[0] <= v <= SIZES[1] for v in inches):
            raise UserError(
                f"The figure size {size!r} is not WIDTHxHEIGHT in inches, each from "
                f"{SIZES[0]:g} to {SIZES[1]:g}. Give it as two numbers, e.g. "
                '--figure-size 6.4x4 (figure_size="6.4x4" or (6.4, 4.0) in cl_bench.report).'
            )
    if dpi is None:
        dpi = default.dpi
    elif isinstance(dpi, bool) or not isinstance(dpi, int) or not DPIS[0] <= dpi <= DPIS[1]:
        raise UserError(
            f"The dpi {dpi!r} is not a whole number from {DPIS[0]} to {DPIS[1]}. Give "
            "the dots per inch of the PNG files, e.g. --dpi 200 (dpi=200 in cl_bench.report)."
        )
    return Look(inches, dpi)


LOOK = Look()
FIGSIZE, DPI = LOOK.size, LOOK.dpi  # the default look, for figures drawn elsewhere
PIXELS = LOOK.pixels  # width, height of every PNG of the default look


@dataclass
class Plot:
    """A figure and the file stem and caption it is published under."""

    name: str
    caption: str
    figure: Figure


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _figure(look: Look, ncols: int = 1) -> tuple[Figure, list]:
    fig = Figure(figsize=look.size, dpi=look.dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(np.atleast_1d(fig.subplots(1, ncols)))


def _style(i: int) -> dict:
    colour = sns.color_palette("colorblind")[i % 10]
    return {
        "color": colour,
        "marker": MARKERS[i % len(MARKERS)],
        "linestyle": LINESTYLES[i % len(LINESTYLES)],
    }


def title(fig: Figure, text: str) -> None:
    """A figure title wrapped to the figure's width (about 0.6 em per character)."""
    size = 11
    chars = max(20, int(fig.get_figwidth() * 72 / (0.6 * size)))
    fig.suptitle(textwrap.fill(text, chars), fontsize=size)


def _entry(label: str) -> str:
    return textwrap.fill(label, LEGEND_WIDTH, subsequent_indent="  ")


def _fits(fig: Figure, artist) -> bool:
    """Whether ``artist`` lies inside the figure with a margin and clear of the figure's
    title, at the figure's dpi and at 72 (where PDF and SVG lay text out, which hinting
    makes a little larger)."""
    own = fig.get_dpi()
    try:
        for dpi in (own, 72):
            fig.set_dpi(dpi)
            fig.canvas.draw()
            box, page = artist.get_window_extent(), fig.bbox
            room = 0.02 * page.height
            heading = fig._suptitle.get_window_extent() if fig._suptitle else None
            if not (
                box.x0 >= page.x0
                and box.y0 >= page.y0 + room
                and box.x1 <= page.x1
                and box.y1 <= page.y1 - room
                and (heading is None or not box.overlaps(heading))
            ):
                return False
        return True
    finally:
        fig.set_dpi(own)


def _legend(fig: Figure, handles: list, labels: list[str], wide: bool = False) -> None:
    """The figure's legend, outside the axes on the right, one entry per configuration:
    in one column, else in smaller type, else in two columns, else below the axes in as
    many columns as fit, so that it lies inside the figure; ``wide`` (a figure of two
    panels) tries below first when there are more than 6 entries."""
    entries = [_entry(label) for label in labels]
    tries = [("right center", 1, "small"), ("right center", 1, "x-small")]
    tries += [("right center", 2, "x-small")] + [("lower center", n, "x-small") for n in (4, 3, 2)]
    if wide and len(labels) > 6:
        tries = [("lower center", n, "small") for n in (4, 3)] + tries
    for place, ncols, size in tries:
        legend = fig.legend(
            handles, entries, loc=f"outside {place}", ncols=ncols, fontsize=size, frameon=False
        )
        if _fits(fig, legend):
            return
        legend.remove()
    fig.legend(handles, entries, loc="outside lower center", ncols=2, fontsize="xx-small")


def render(fig: Figure, fmt: str, dpi: int | None = None) -> bytes:
    """PNG, SVG or PDF bytes, without dates or random ids, so unchanged data gives
    unchanged files."""
    buf = io.BytesIO()
    metadata = {"png": {"Software": None}, "pdf": {"CreationDate": None, "Producer": None}}
    with matplotlib.rc_context({"svg.hashsalt": "cl-bench"}):
        fig.savefig(
            buf,
            format=fmt,
            dpi=dpi or fig.get_dpi(),
            metadata=metadata.get(fmt, {"Date": None}),
        )
    return buf.getvalue()


def _mean_std(rows: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(rows, dtype=float)
    std = a.std(axis=0, ddof=1) if len(a) > 1 else np.zeros(a.shape[1])
    return a.mean(axis=0), std


def _labels(table: pd.DataFrame) -> list[str]:
    return [
        titled(label, method) for label, method in zip(table["label"], table["method"], strict=True)
    ]


def curve(ctx: Context, runs: pd.DataFrame, table: pd.DataFrame, look: Look = LOOK) -> Plot:
    """Accuracy on all seen classes after each task: mean line, +-1 std band; y 0-100."""
    fig, (ax,) = _figure(look)
    for i, (row, label) in enumerate(zip(table.itertuples(), _labels(table), strict=True)):
        own = runs[runs["config"] == row.config]
        mean, std = _mean_std(own["acc_seen"].tolist())
        x = own["seen_classes"].iloc[0]
        style = _style(i)
        ax.plot(x, mean, label=f"{label} (n={row.n})", clip_on=False, **style)
        ax.fill_between(
            x,
            np.clip(mean - std, 0, 100),
            np.clip(mean + std, 0, 100),
            color=style["color"],
            alpha=0.2,
            lw=0,
        )
    ax.set(xlabel="classes seen", ylabel="accuracy on seen classes (%)", ylim=(0, 100))
    ax.set_xticks(x)
    ax.grid(alpha=0.3)
    title(fig, f"{ctx.figure_title}: accuracy after each task")
    _legend(fig, *ax.get_legend_handles_labels())
    return Plot(
        f"curve_{slug(ctx.scenario)}",
        f"{ctx.scenario}: accuracy on the seen classes after each task (mean ± std over "
        f"seeds); {ctx.caption}",
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


def log_positions(ax, x: np.ndarray) -> np.ndarray:
    """Put ``x`` on a log axis padded by 2x each side (1-2-5 ticks on a narrow range) and
    return where each value is drawn: itself, or, for a value of 0 (a method that adds
    nothing, which a log axis cannot place), a shaded band a decade left of the smallest
    positive value, ticked "0", the zeros side by side so none hides another."""
    x = np.asarray(x, dtype=float)
    positive = x[x > 0]
    low, high = (positive.min(), positive.max()) if len(positive) else (1.0, 1.0)
    ax.set_xscale("log")
    locator = LogLocator(subs=(1.0, 2.0, 5.0) if high / low < 25 else (1.0,))
    ticks = [t for t in locator.tick_values(low / 2, high * 2) if low / 2 <= t <= high * 2]
    left, pos = low / 2, x.copy()
    zero = np.flatnonzero(x <= 0)
    if len(zero):
        at = low / 10
        pos[zero] = at * 1.3 ** (np.arange(len(zero)) - (len(zero) - 1) / 2)
        left = at / 2
        ax.axvspan(left, at * 2, color=ZERO_SHADE, zorder=0, lw=0)
        ticks = [at] + [t for t in ticks if t >= at * 3]
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(left, high * 2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    zero_tick = ticks[0] if len(zero) else None
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: "0" if v == zero_tick else _short(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    return pos


def accuracy_limits(low: float, high: float) -> tuple[float, float]:
    """A y range around [low, high] with some room, never outside 0-100."""
    pad = max(2.0, 0.08 * (high - low))
    return max(0.0, low - pad), min(100.0, high + pad)


def cost(ctx: Context, table: pd.DataFrame, look: Look = LOOK) -> Plot:
    """Last accuracy vs added parameters per task and vs inference GFLOPs per image."""
    fig, axes = _figure(look, ncols=2)
    y, yerr = table["last_acc_mean"].to_numpy(), table["last_acc_std"].fillna(0).to_numpy()
    labels = _labels(table)
    zero_added = bool((table["added_params_mean"] <= 0).any())
    for ax, key, xlabel in (
        (axes[0], "added_params_mean", "added parameters / task"),
        (axes[1], "gflops_mean", "inference GFLOPs / image"),
    ):
        x = table[key].to_numpy(dtype=float)
        pos = log_positions(ax, x)
        for i, label in enumerate(labels):  # unclipped: a marker at 100 % shows whole
            style = _style(i) | {"linestyle": "none"}
            drawn = ax.errorbar(pos[i], y[i], yerr=yerr[i], label=label, capsize=3, ms=7, **style)
            for part in drawn.get_children():
                part.set_clip_on(False)
        front = pareto_front(x, y)
        ax.plot(pos[front], y[front], color="0.4", ls=":", drawstyle="steps-post", zorder=1)
        ax.scatter(
            pos[front],
            y[front],
            s=260,
            facecolors="none",
            edgecolors="0.2",
            label="Pareto front",
            clip_on=False,
        )
        ax.set(xlabel=xlabel + " (log)", ylabel="last accuracy (%)")
        ax.set_ylim(*accuracy_limits(float(np.min(y - yerr)), float(np.max(y + yerr))))
        ax.grid(alpha=0.3)
    title(fig, f"{ctx.figure_title}: last accuracy vs cost")
    _legend(fig, *axes[0].get_legend_handles_labels(), wide=True)
    zero = "; shaded at 0: methods that add no parameters" if zero_added else ""
    return Plot(
        f"cost_{slug(ctx.scenario)}",
        f"{ctx.scenario}: last accuracy vs added parameters per task and vs inference "
        f"GFLOPs per image (log x; ringed: Pareto front{zero}); {ctx.caption}",
        fig,
    )


def _matrices(own: pd.Series) -> np.ndarray:
    """Seeds x T x T accuracy matrices, NaN above the diagonal."""
    rows = own.tolist()
    t = len(rows[0])
    a = np.full((len(rows), t, t), np.nan)
    for s, m in enumerate(rows):
        for i, r in enumerate(m):
            a[s, i, : len(r)] = r
    return a


def forgetting_per_task(matrix: np.ndarray) -> np.ndarray:
    """Per task j before the last: the best accuracy on j before the final task minus the
    final one (what :mod:`cl_bench.metrics` averages as forgetting)."""
    t = matrix.shape[0]
    return np.array([np.nanmax(matrix[j : t - 1, j]) - matrix[t - 1, j] for j in range(t - 1)])


def backward_transfer(matrix: np.ndarray) -> float:
    """Mean over tasks before the last of final minus just-learned accuracy (BWT)."""
    t = matrix.shape[0]
    return float(np.mean([matrix[t - 1, j] - matrix[j, j] for j in range(t - 1)]))


def forgetting(ctx: Context, runs: pd.DataFrame, table: pd.DataFrame, look: Look = LOOK):
    """Forgetting of each task at the end of the stream (left) and backward transfer
    (right), mean ± std over seeds; None for a single-task stream."""
    if len(runs["acc_matrix"].iloc[0]) < 2:
        return None
    fig, (left, right) = _figure(look, ncols=2)
    for i, (row, label) in enumerate(zip(table.itertuples(), _labels(table), strict=True)):
        a = _matrices(runs.loc[runs["config"] == row.config, "acc_matrix"])
        per_task = np.array([forgetting_per_task(m) for m in a])
        bwt = np.array([backward_transfer(m) for m in a])
        std = per_task.std(axis=0, ddof=1) if len(a) > 1 else np.zeros(per_task.shape[1])
        tasks = np.arange(1, per_task.shape[1] + 1)
        style = _style(i)
        left.errorbar(tasks, per_task.mean(axis=0), yerr=std, capsize=3, label=label, **style)
        spread = bwt.std(ddof=1) if len(bwt) > 1 else 0.0
        right.errorbar(i, bwt.mean(), yerr=spread, capsize=3, ms=7, **style | {"linestyle": "none"})
    left.set(xlabel="task", ylabel="forgetting at the end (pp)", xticks=tasks)
    left.axhline(0, color="0.3", lw=0.8)
    right.axhline(0, color="0.3", lw=0.8)
    right.set(ylabel="backward transfer (pp)", xticks=[], xlim=(-0.7, len(table) - 0.3))
    for ax in (left, right):
        ax.grid(alpha=0.3)
    title(fig, f"{ctx.figure_title}: forgetting and backward transfer")
    _legend(fig, *left.get_legend_handles_labels(), wide=True)
    return Plot(
        f"forgetting_{slug(ctx.scenario)}",
        f"{ctx.scenario}: forgetting of each task at the end (best earlier minus final "
        f"accuracy) and backward transfer (final minus just-learned accuracy, mean over "
        f"tasks), in percentage points, mean ± std over seeds; {ctx.caption}",
        fig,
    )


def matrix(ctx: Context, row, runs: pd.DataFrame, look: Look = LOOK) -> Plot:
    """Mean accuracy matrix A[i][j] over seeds (row i: after task i; column j: task j)."""
    a = _matrices(runs[runs["config"] == row.config]["acc_matrix"])
    mean = a.mean(axis=0)  # every seed has the same triangle; NaN above it stays NaN
    t = mean.shape[0]
    fig, (ax,) = _figure(look)
    ticks = [str(k + 1) for k in range(t)]
    # the colour bar beside the square matrix, both centred, wherever the matrix's side
    # leaves room (a colour bar laid out by the figure stays at its edge)
    ax.set_anchor("C")
    sns.heatmap(
        mean,
        ax=ax,
        cbar_ax=ax.inset_axes((1.05, 0.0, 0.05, 1.0)),
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
    ax.set(xlabel="evaluated on task", ylabel="after training task")
    label = titled(row.label, row.method)
    title(fig, f"{ctx.figure_title}: {label} (n={row.n})")
    return Plot(
        f"matrix_{slug(ctx.scenario)}_{slug(row.label)}",
        f"{ctx.scenario}, {label}: accuracy matrix, mean over seeds; {ctx.caption}",
        fig,
    )


def protocol(ctx: Context, runs: pd.DataFrame, table: pd.DataFrame, look: Look = LOOK):
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
    fig, (ax,) = _figure(look)
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
            for label, n in zip(_labels(part), part["n"], strict=True)
        ],
    )
    ax.invert_yaxis()
    ax.set(xlabel="accuracy (%)", xlim=(0, 100))
    title(fig, f"{ctx.figure_title}: protocol sensitivity")
    _legend(fig, *ax.get_legend_handles_labels())
    ax.grid(alpha=0.3, axis="x")
    return Plot(
        f"protocol_{slug(ctx.scenario)}",
        f"{ctx.scenario}: the same method under different evaluation protocols; {ctx.caption}",
        fig,
    )


def figures(ctx: Context, runs: pd.DataFrame, table: pd.DataFrame, look: Look = LOOK):
    """Every plot of one scenario: ``runs`` and ``table`` hold that scenario only."""
    plots = [curve(ctx, runs, table, look), cost(ctx, table, look)]
    plots += [p for p in (forgetting(ctx, runs, table, look),) if p]
    plots += [matrix(ctx, row, runs, look) for row in table.itertuples()]
    sensitivity = protocol(ctx, runs, table, look)
    return plots + ([sensitivity] if sensitivity else [])
