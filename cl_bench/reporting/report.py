"""``cl-bench report``: result files -> comparison tables (md, tex, csv, html) and plots.

Everything is computed from result JSON files; the only other input is the
``published`` block of each method's card, shown beside the measured numbers of
``--protocol paper`` runs with its protocol. A table row is one configuration:
runs are grouped by the hash of their resolved config, so runs that differ in
protocol (the protocol settings a method declares, test shuffling), backbone,
weights or any other setting are never averaged together; the label names the
protocol as the result records it (``protocol.label``), and the legend gives the
recorded meaning of every protocol setting in the report.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from cl_bench.errors import UserError, suggest, unknown
from cl_bench.reporting import captions, statistics
from cl_bench.reporting.latex import to_latex
from cl_bench.reporting.statistics import UPPER_MARK, Comparison
from cl_bench.store import results
from cl_bench.store.atomic import replace_atomically
from cl_bench.store.protocol_block import ORDERED_TEST
from cl_bench.store.records import InvalidResult, Result

FORMATS = ("md", "tex", "csv", "html")
ACROSS = "all scenarios"  # the ranks table after the scenarios' tables
IMAGE_FORMATS = ("png", "svg", "pdf")


@dataclass(frozen=True)
class Metric:
    """A table column: ``key`` in the runs frame; best = max if ``higher`` else min."""

    key: str
    title: str
    higher: bool
    decimals: int
    spread: bool  # show +- std (seed-dependent numbers); counts and FLOPs are not
    optional: bool = False  # left out of a table where no row has it (GPU memory on a CPU)


METRICS = (
    Metric("avg_acc", "avg acc", True, 2, True),
    Metric("last_acc", "last acc", True, 2, True),
    Metric("forgetting", "forgetting", False, 2, True),
    Metric("added_params", "added params/task", False, 0, False),
    Metric("stored_params", "stored params", False, 0, False),
    Metric("gflops", "GFLOPs/image", False, 3, False),
    Metric("train_s", "train s", False, 1, False),
    Metric("total_s", "total s", False, 1, False, True),
    Metric("peak_rss_gib", "peak RSS GiB", False, 2, False, True),
    Metric("gpu_peak_gib", "GPU peak GiB", False, 2, False, True),
)
PUBLISHED = {"avg_acc": "paper avg", "last_acc": "paper last"}

PAPER_LEGEND = (
    "[paper]",
    "run with --protocol paper: each method as its published numbers "
    "were measured (its card's paper: block); the published numbers "
    "stand beside these rows only. Rows without a mark ran the fair "
    "protocol (the default).",
)
STALE_MARK = " [stale]"
TUNED_LEGEND = (
    "[tuned]",
    "settings chosen by `cl-bench tune` on a validation split of the training data (the "
    "test split unread); [tuned on X]: by a search on scenario X, evaluated here.",
)
VALIDATION_LEGEND = (
    "[validation]",
    "scored on a validation split held out of the training data (run --validation), "
    "not on the test set.",
)
STALE_LEGEND = (
    "a result of other code or package versions than those installed now "
    "(shown with --allow-stale); `cl-bench status` says what changed."
)
LEGEND_AFTER = (
    (
        ORDERED_TEST,
        "test batches follow the class order (scenario.test_shuffle=false) "
        "instead of being shuffled.",
    ),
    (
        "columns",
        "avg acc: mean over tasks of top-1 on all seen classes; last acc: after the "
        "final task; forgetting: best earlier minus final per-task accuracy; added "
        "params/task: parameters the last task added; stored params: everything kept "
        "beyond the backbone; GFLOPs/image: inference at the end; train s: training "
        "time summed over tasks (shared, cached feature extraction excluded); total s: the "
        "whole run; peak RSS GiB: the run's peak resident memory (of the process so far "
        "where the kernel cannot reset the peak at a run's start); GPU peak GiB: CUDA's "
        "peak allocated memory. "
        "Accuracies in %, mean ± std over seeds (n = seed count); bold: the best of a "
        "column (for accuracy and forgetting only where a paired test puts it ahead of "
        "the runner-up, as the note under each table says).",
    ),
)


def load_runs(
    results_dir: Path,
    scenarios: Iterable[str] = (),
    methods: Iterable[str] = (),
    allow_stale: bool = False,
) -> tuple[pd.DataFrame, list[tuple[Path, str]]]:
    """Finished runs under ``results_dir/runs`` as one row each, labelled; also the
    files skipped (not a valid record: torn, damaged, foreign, of another schema), each
    with why. A stale result (of other code or packages, :mod:`cl_bench.store.staleness`)
    is refused unless ``allow_stale``, which labels it ``[stale]``."""
    scenarios, methods = list(scenarios), list(methods)
    rows, skipped = [], []
    for path in results.find(results_dir):
        try:
            rows.append(Result.from_file(path).row(results_dir))
        except (OSError, InvalidResult) as e:
            skipped.append((path, str(e)))
    if not rows:
        invalid = (
            f" ({len(skipped)} result file(s) are not valid records, e.g. "
            f"{skipped[0][0]}: {skipped[0][1]}.)"
            if skipped
            else ""
        )
        raise UserError(
            f"No finished runs in {Path(results_dir) / 'runs'}.{invalid} Run some "
            f"first, e.g. `cl-bench run --out {results_dir}`, or point --results "
            "at the folder `cl-bench run --out` wrote to."
        )
    runs = pd.DataFrame(rows)
    for column, wanted in (("scenario", scenarios), ("method", methods)):
        present = sorted(runs[column].unique())
        for name in wanted:
            if name not in present:
                raise UserError(
                    f'No runs of {column} "{name}" in {results_dir}.'
                    f"{suggest(name, present)} It has: {', '.join(present)}."
                )
        if wanted:
            runs = runs[runs[column].isin(wanted)]
    runs = runs.sort_values(["scenario", "method", "config", "seed"]).reset_index(drop=True)
    stale = runs["stale"] != ""
    if stale.any() and not allow_stale:
        raise stale_refusal(runs[stale], results_dir)
    runs["label"] = _labels(runs)
    runs.loc[stale, "label"] = runs.loc[stale, "label"] + STALE_MARK
    return runs, skipped


def stale_refusal(stale: pd.DataFrame, results_dir: Path) -> UserError:
    first = stale.iloc[0]
    return UserError(
        f"{len(stale)} result(s) in {results_dir} are stale: made by other code or package "
        f"versions than those installed now, e.g. {first.scenario}/{first.method} seed "
        f"{first.seed}: {first.stale}. Run the same `cl-bench run` command again to compute "
        "them with the current code (`cl-bench status` lists every stale run), or pass "
        "--allow-stale to show them, marked [stale]."
    )


def _labels(runs: pd.DataFrame) -> pd.Series:
    """'tosca (selection=batch, ordered test)'; the backbone joins the label when a
    scenario has several, and any other differing setting when labels still collide."""
    keys = runs.drop_duplicates(["scenario", "method", "config"])
    label_of: dict[tuple, str] = {}
    for scenario, group in keys.groupby("scenario"):
        several_backbones = group[["backbone", "weights"]].drop_duplicates().shape[0] > 1
        several_devices = group["device"].nunique() > 1
        base = {
            row.config: _base_label(row, several_backbones, several_devices)
            for row in group.itertuples()
        }
        for label in set(base.values()):
            clash = group[group["config"].map(base) == label]
            extra = _differing(clash["flat_config"].tolist()) if len(clash) > 1 else [{}]
            for row, diff in zip(clash.itertuples(), extra, strict=True):
                suffix = ", ".join(f"{k}={v}" for k, v in diff.items())
                full = f"{label[:-1]}; {suffix})" if label.endswith(")") else f"{label} ({suffix})"
                label_of[(scenario, row.config)] = full if suffix else label
    return pd.Series(
        [label_of[(s, c)] for s, c in zip(runs["scenario"], runs["config"], strict=True)],
        index=runs.index,
    )


def legend(runs: pd.DataFrame) -> list[tuple[str, str]]:
    """The legend: the paper mark, each protocol setting of the runs (by name) with its
    recorded meaning, the test order and the columns."""
    meanings: dict[str, str] = {}
    for recorded in runs["protocol_meanings"]:
        for key, meaning in recorded.items():
            meanings.setdefault(key, meaning + ".")
    stale = [("[stale]", STALE_LEGEND)] if runs["stale"].ne("").any() else []
    tuned = [TUNED_LEGEND] if "tuned" in runs and runs["tuned"].ne("").any() else []
    if "marks" in runs and runs["marks"].str.contains("[validation]", regex=False).any():
        tuned.append(VALIDATION_LEGEND)
    return [PAPER_LEGEND, *tuned, *sorted(meanings.items()), *LEGEND_AFTER, *stale]


def _base_label(row, several_backbones: bool, several_devices: bool = False) -> str:
    """'tosca (selection=sample)'; a run of a named protocol other than the default
    says so: 'tosca [paper] (selection=batch, ...)'; the device joins the label when
    the scenario has runs on several ('tosca (selection=sample, cuda sm_90)')."""
    method = row.method if row.protocol == "fair" else f"{row.method} [{row.protocol}]"
    method += getattr(row, "marks", "")
    parts = [row.protocol_label] if row.protocol_label else []
    if several_backbones:
        parts.append(row.backbone + ("" if row.weights == "pretrained" else f" {row.weights}"))
    if several_devices:
        parts.append(row.device)
    return f"{method} ({', '.join(parts)})" if parts else method


def _differing(configs: list[dict]) -> list[dict]:
    """Per config, the settings whose values differ across ``configs`` (short keys)."""
    keys = sorted(
        {k for c in configs for k in c if len({repr(other.get(k)) for other in configs}) > 1}
    )
    return [{k.removeprefix("method."): c.get(k) for k in keys} for c in configs]


@cache
def published(method: str, scenario: str) -> tuple[float | None, float | None, str] | None:
    """(avg, last, protocol) from the method card's ``published`` block, or None."""
    from cl_bench.cards.catalogue import load_method

    try:
        block = load_method(method).raw.get("published") or {}
    except UserError:
        return None
    numbers = (block.get("results") or {}).get(scenario)
    if not numbers:
        return None
    return numbers.get("avg_acc"), numbers.get("last_acc"), str(block.get("protocol", ""))


def aggregate(
    runs: pd.DataFrame, published_for: Callable[[str, str], tuple | None] = published
) -> pd.DataFrame:
    """One row per (scenario, configuration): mean, std (ddof=1) and n over seeds of
    every metric, plus the published numbers and their protocol beside ``paper`` rows
    (a ``fair`` row of the same method shows how far the protocol moves the number)."""
    keys = ["scenario", "method", "protocol", "config", "label"]
    stats = runs.groupby(keys, sort=False)[[m.key for m in METRICS]].agg(["mean", "std"])
    stats.columns = [f"{k}_{s}" for k, s in stats.columns]
    stats["n"] = runs.groupby(keys, sort=False)["seed"].nunique()
    table = stats.reset_index()
    pub = [
        (published_for(m, s) if p == "paper" else None) or (None, None, None)
        for m, s, p in zip(table["method"], table["scenario"], table["protocol"], strict=True)
    ]
    table["pub_avg_acc"], table["pub_last_acc"], table["pub_protocol"] = zip(*pub, strict=True)
    return table.sort_values(["scenario", "method", "label"]).reset_index(drop=True)


@dataclass
class Grid:
    """A rendered-format-neutral table: header, rows of (text, best) cells, notes."""

    header: list[str]
    rows: list[list[tuple[str, bool]]]
    notes: list[str]


def _number(value: float | None, decimals: int) -> str:
    return "–" if value is None or pd.isna(value) else f"{value:,.{decimals}f}"


def grid(table: pd.DataFrame, comparison: Comparison | None = None) -> Grid:
    """The cells of one scenario's table: measured numbers with the best per column
    marked (compared as displayed, so ties are all marked), published numbers beside
    them with a note naming their protocol. With a ``comparison``
    (:mod:`cl_bench.reporting.statistics`): a column of paired differences against its
    reference, bold in a seed-dependent column only for a significant best, and its
    upper-bound rows last, marked and never bold."""
    has_pub = table["pub_protocol"].notna().any()
    ups = comparison.upper if comparison else frozenset()
    table = table.sort_values("config", key=lambda c: c.isin(ups), kind="stable")  # last
    upper = table["config"].isin(ups).to_numpy()
    present = [m for m in METRICS if not m.optional or table[f"{m.key}_mean"].notna().any()]
    header = ["method", "seeds"]
    for m in present:
        header.append(m.title + (" (%)" if m.spread else ""))
        if comparison and m is METRICS[0]:
            header.append(comparison.header)
        if has_pub and m.key in PUBLISHED:
            header.append(PUBLISHED[m.key])
    notes: list[str] = []
    best = {}
    for m in present:  # a column where every row shows the same value has no best
        shown = table.loc[~upper, f"{m.key}_mean"].round(m.decimals)
        best[m.key] = (shown.max() if m.higher else shown.min()) if shown.nunique() > 1 else None
    rows = []
    for row in table.itertuples():
        mark = row.config in ups
        cells = [(row.label + (UPPER_MARK if mark else ""), False), (f"n={row.n}", False)]
        ref = ""
        if isinstance(row.pub_protocol, str):
            note = f"{row.method}: {row.pub_protocol}"
            notes += [] if note in notes else [note]
            ref = f" [{notes.index(note) + 1}]"
        for m in present:
            mean, std = getattr(row, f"{m.key}_mean"), getattr(row, f"{m.key}_std")
            text = _number(mean, m.decimals)
            if m.spread and not pd.isna(std) and not pd.isna(mean):
                text += f" ± {std:.{m.decimals}f}"
            bold = best[m.key] is not None and round(mean, m.decimals) == best[m.key]
            if comparison and m.spread:
                bold = comparison.bold.get(m.key) == row.config
            cells.append((text, bold and not mark))
            if comparison and m is METRICS[0]:
                cells.append((comparison.delta(row.config), False))
            if has_pub and m.key in PUBLISHED:
                value = getattr(row, f"pub_{m.key}")
                cells.append((_number(value, m.decimals) + ("" if pd.isna(value) else ref), False))
        rows.append(cells)
    notes = [f"[{i}] published: {n}" for i, n in enumerate(notes, 1)]
    return Grid(header, rows, notes + (comparison.notes() if comparison else []))


def _md_cell(text: str, bold: bool) -> str:
    text = text.replace("|", r"\|")
    return f"**{text}**" if bold else text


def to_markdown(
    tables: dict[str, Grid],
    images: dict[str, list[tuple[str, str]]],
    notes: list[tuple[str, str]],
    contexts: dict[str, captions.Context] | None = None,
) -> str:
    """GitHub Markdown: a table per scenario under its caption (backbone, shared
    settings), its notes, links to its PNG plots."""
    out = ["# cl-bench report", ""]
    for scenario, g in tables.items():
        ctx = (contexts or {}).get(scenario)
        out += [f"## {scenario}", ""] + ([ctx.sentence, ""] if ctx else [])
        out += [
            "| " + " | ".join(g.header) + " |",
            "|" + "|".join(["---"] + ["--:"] * (len(g.header) - 1)) + "|",
        ]
        out += ["| " + " | ".join(_md_cell(t, b) for t, b in row) + " |" for row in g.rows]
        out += [""] + [f"{n}  " for n in g.notes] + ([""] if g.notes else [])
        out += [f"![{caption}]({name})" for name, caption in images.get(scenario, [])]
        out.append("")
    out += ["## Protocols and columns", ""] + [f"- **{k}**: {v}" for k, v in notes]
    return "\n".join(out) + "\n"


def to_csv(runs: pd.DataFrame) -> str:
    """Long format: one row per run and metric, with everything that identifies the run;
    the metrics ``acc_task_<j>`` are the accuracy on task j after the last task (the
    accuracy matrix's final row)."""
    ids = [
        "scenario",
        "method",
        "protocol",
        "label",
        "seed",
        "backbone",
        "weights",
        "device",
        "protocol_settings",
        "test_shuffle",
        "config",
        "file",
        "config_file",
    ]
    long = runs.melt(id_vars=ids, value_vars=[m.key for m in METRICS], var_name="metric")
    tasks = [
        {**{k: run[k] for k in ids}, "metric": f"acc_task_{j}", "value": value}
        for run in runs[[*ids, "acc_matrix"]].to_dict("records")
        for j, value in enumerate(run["acc_matrix"][-1], 1)
    ]
    long = pd.concat([long, pd.DataFrame(tasks, columns=[*ids, "metric", "value"])])
    numbered = re.compile(r"\d+")
    return long.sort_values(
        ["scenario", "label", "seed", "metric"],
        key=lambda c: (
            c.str.replace(numbered, lambda m: m.group().zfill(6), regex=True)
            if c.name == "metric"
            else c
        ),
    ).to_csv(index=False)


_CSS = """body{font-family:system-ui,sans-serif;max-width:75em;margin:2em auto;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;border-top:2px solid;border-bottom:2px solid}
th,td{padding:.3em .6em;text-align:right;white-space:nowrap}thead{border-bottom:1px solid}
th:first-child,td:first-child{text-align:left;white-space:normal}.notes{font-size:.9em}
figure{display:inline-block;margin:.5em}img{max-width:100%;height:auto}"""


def to_html(
    tables: dict[str, Grid],
    images: dict[str, list[tuple[str, str, bytes]]],
    notes: list[tuple[str, str]],
    contexts: dict[str, captions.Context] | None = None,
) -> str:
    """One self-contained page: tables under their captions, PNG plots as data URIs,
    the protocol legend."""
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>cl-bench report</title>",
        '<link rel="icon" href="data:,">',
        f"<style>{_CSS}</style></head><body>",
        "<h1>cl-bench report</h1>",
    ]
    for scenario, g in tables.items():
        ctx = (contexts or {}).get(scenario)
        out += [f"<h2>{e(scenario)}</h2>"] + ([f"<p>{e(ctx.sentence)}</p>"] if ctx else [])
        out += [
            "<table><thead><tr>"
            + "".join(f"<th>{e(h)}</th>" for h in g.header)
            + "</tr></thead><tbody>",
        ]
        out += [
            "<tr>"
            + "".join(
                f"<td><strong>{e(t)}</strong></td>" if b else f"<td>{e(t)}</td>" for t, b in row
            )
            + "</tr>"
            for row in g.rows
        ]
        out.append("</tbody></table>")
        out += [f'<p class="notes">{e(n)}</p>' for n in g.notes]
        for _, caption, png in images.get(scenario, []):
            data = base64.b64encode(png).decode()
            out.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{e(caption)}">'
                f"<figcaption>{e(caption)}</figcaption></figure>"
            )
    out += ["<h2>Protocols and columns</h2>", "<dl>"]
    out += [f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in notes]
    out += ["</dl>", "</body></html>"]
    return "\n".join(out) + "\n"


def package_note(runs: pd.DataFrame) -> str | None:
    """A table's note when its runs were measured with different package versions: each
    version with the rows that used it, since a number may move with them."""
    from cl_bench.packages import differing

    diff = differing(runs["packages"])
    if not diff:
        return None
    parts = []
    for name, values in diff.items():
        users = [
            ", ".join(sorted(set(runs.loc[[p.get(name) == v for p in runs["packages"]], "label"])))
            for v in values
        ]
        parts.append(
            f"{name} " + " / ".join(f"{v} ({u})" for v, u in zip(values, users, strict=True))
        )
    return (
        f"Package versions differ between these runs: {'; '.join(parts)}. Numbers may "
        "move with them; compare runs made in one locked environment."
    )


def write_report(
    results_dir: Path,
    out: Path,
    scenarios: Iterable[str] = (),
    methods: Iterable[str] = (),
    formats: Iterable[str] = FORMATS,
    image_formats: Iterable[str] = IMAGE_FORMATS,
    allow_stale: bool = False,
    against: str | None = None,
    figure_size: str | tuple[float, float] | None = None,
    dpi: int | None = None,
) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Write the report into ``out``; returns (files written, result files skipped and
    why). Stale results: as :func:`load_runs`. Each table compares its rows with the
    row ``against`` names (a method or a label; None: the best by average accuracy),
    paired by seed (:mod:`cl_bench.reporting.statistics`). Figures are ``figure_size``
    inches ("6.4x4" or (6.4, 4.0)) at ``dpi`` (None: :data:`plots.LOOK`'s)."""
    from cl_bench.reporting import cd_plot, plots

    look = plots.look(figure_size, dpi)
    formats, image_formats = list(formats), list(image_formats)
    for name in formats:
        if name not in FORMATS:
            raise unknown("report format", name, FORMATS)
    for name in image_formats:
        if name not in IMAGE_FORMATS:
            raise unknown("image format", name, IMAGE_FORMATS)
    if not formats and not image_formats:
        raise UserError(
            "Nothing to write: give --format (md,tex,csv,html) or --images (png,svg,pdf)."
        )
    runs, skipped = load_runs(results_dir, scenarios, methods, allow_stale)
    table = aggregate(runs)
    paired = [m for m in METRICS if m.spread]
    upper = {m: statistics.card_upper_bound(m) for m in runs["method"].unique()}.__getitem__
    compared = statistics.comparisons(runs, paired, against, upper)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def save(name: str, data: bytes) -> None:
        replace_atomically(out / name, lambda f: f.write(data), binary=True)
        written.append(out / name)

    label_method = dict(zip(table["label"], table["method"], strict=True))
    label_method.update({k + statistics.UPPER_MARK: v for k, v in label_method.items()})
    grids, figures, contexts, row_methods = {}, {}, {}, {}
    for scenario, part in table.groupby("scenario", sort=True):
        grids[scenario] = grid(part, compared[scenario])
        note = package_note(runs[runs["scenario"] == scenario])
        if note:
            grids[scenario].notes.append(note)
        figures[scenario] = []
        contexts[scenario] = ctx = captions.context(runs[runs["scenario"] == scenario])
        row_methods[scenario] = [label_method[row[0][0]] for row in grids[scenario].rows]
        if image_formats or "html" in formats:
            for fig in plots.figures(ctx, runs[runs["scenario"] == scenario], part, look):
                png = plots.render(fig.figure, "png")
                for fmt in image_formats:
                    save(
                        f"{fig.name}.{fmt}", png if fmt == "png" else plots.render(fig.figure, fmt)
                    )
                figures[scenario].append((f"{fig.name}.png", fig.caption, png))
    notes = legend(runs)
    across = statistics.ranks(table, paired, upper)
    if isinstance(across, str):
        notes.append(("ranks across scenarios", across))
    else:
        grids[ACROSS] = Grid(*statistics.rank_cells(across, paired))
        figures[ACROSS] = []
        for m in paired if image_formats or "html" in formats else ():
            fig = cd_plot.diagram(across.average[m.key], across.cd, m.title, across.n, look)
            png = plots.render(fig.figure, "png")
            for fmt in image_formats:
                save(f"{fig.name}.{fmt}", png if fmt == "png" else plots.render(fig.figure, fmt))
            figures[ACROSS].append((f"{fig.name}.png", fig.caption, png))
    if "csv" in formats:
        stats = statistics.paired_statistics(runs, paired, against, upper)
        save("paired.csv", stats.to_csv(index=False).encode())
        if not isinstance(across, str):
            save("ranks.csv", across.average.to_csv().encode())
    links = (
        {s: [(n, c) for n, c, _ in f] for s, f in figures.items()} if "png" in image_formats else {}
    )
    renderers = {
        "md": lambda: to_markdown(grids, links, notes, contexts),
        "tex": lambda: to_latex(grids, contexts, row_methods),
        "csv": lambda: to_csv(runs),
        "html": lambda: to_html(grids, figures, notes, contexts),
    }
    for fmt in formats:
        save(f"report.{fmt}" if fmt != "csv" else "runs.csv", renderers[fmt]().encode())
    return written, skipped
