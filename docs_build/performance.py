"""The performance page: per figure of ``bench/figures.yaml``, what it measures, how to
make it, its target, the newest measurement's headline rows and the history below; for
a figure with a drawing (:data:`DRAWN`), the newest measurement drawn, as an SVG file
beside the page, and its table.

The measurements are ``bench/results/*.json`` read through :mod:`bench.measurements`
(its docstring is the schema); a file that does not follow it stops the build, named.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import cost_vs_tasks_plot, measurements
from docs_build import DocsError
from docs_build.md import code, slug, table, text

PAGE = "performance.md"
# figure id -> the module that draws its measurement: svg(record) -> SVG text,
# table(record) -> (headers, rows), reasons(record) -> lines
DRAWN = {"cost-vs-tasks": cost_vs_tasks_plot}


def drawing(figure: measurements.Figure, now: measurements.Measurement) -> tuple[list[str], dict]:
    """The lines that show ``now`` drawn under its figure, and ``{file: SVG text}``."""
    drawer = DRAWN.get(figure.id)
    if drawer is None:
        return [], {}
    record = json.loads(now.path.read_text(encoding="utf-8"))
    name = f"{figure.id}.svg"
    headers, rows = drawer.table(record)
    lines = [f"![{text(figure.title)}, measured {now.date}]({name})", ""]
    lines += table(headers, [[text(c) for c in row] for row in rows])
    why = drawer.reasons(record)
    lines += [*(f"- {text(line)}" for line in why), ""] if why else []
    return lines, {name: drawer.svg(record)}


def load(
    results: Path = measurements.RESULTS, figures_path: Path = measurements.FIGURES
) -> tuple[dict[str, measurements.Figure], list[measurements.Measurement]]:
    """The figure catalogue and every measurement, newest first (``load_all``'s order);
    any file that fails the schema, or is not JSON, raises :class:`DocsError` naming it."""
    try:
        figures = measurements.load_figures(figures_path)
    except (OSError, ValueError) as e:
        raise DocsError(f"{figures_path}: {e}") from None
    for path in sorted(results.glob("*.json")):
        try:
            measurements.read(path, figures)
        except (OSError, ValueError) as e:  # the schema's error, or not JSON, not UTF-8
            said = str(e) if path.name in str(e) else f"{path}: not a readable JSON file ({e})"
            raise DocsError(f"bench measurement {said}") from None
    return figures, measurements.load_all(results, figures_path)


def _where(path: Path) -> str:
    root = measurements.ROOT
    return str(path.relative_to(root)) if path.is_relative_to(root) else path.name


def _headline(m: measurements.Measurement) -> str:
    return "; ".join(f"{text(label)}: {text(value)}" for label, value in m.headline)


def figure_section(
    figure: measurements.Figure, found: list[measurements.Measurement]
) -> tuple[list[str], dict[str, str]]:
    """The figure's section, and the files it shows (:func:`drawing`)."""
    lines = [
        f"## {text(figure.title)}",
        "",
        f"**Measures:** {text(figure.measures)}",
        "",
        f"**Command:** {code(figure.command)}",
        "",
        f"**Target:** {text(figure.target)}",
        "",
    ]
    if not found:
        return [*lines, "No measurement yet.", ""], {}
    now = found[0]
    lines += [
        f"### Current: {now.date}",
        "",
        f"Measured {now.date} on {text(now.cpu)}, precision {text(now.precision)}, "
        f"commit {code(now.commit)}"
        + (f", by {code(now.command)}" if now.command and now.command != figure.command else "")
        + f" ({code(_where(now.path))}).",
        "",
    ]
    if now.note:
        lines += [text(now.note), ""]
    lines += table(["measured", "value"], [(text(k), text(v)) for k, v in now.headline], ["l", "r"])
    drawn, files = drawing(figure, now)
    lines += drawn
    lines += ["### History", "", "Newest first; compare values within one CPU.", ""]
    lines += table(
        ["date", "CPU", "precision", "commit", "headline"],
        [(m.date, text(m.cpu), text(m.precision), code(m.commit), _headline(m)) for m in found],
    )
    return lines, files


def performance_page(
    results: Path = measurements.RESULTS, figures_path: Path = measurements.FIGURES
) -> dict[str, str]:
    """``{performance.md: ...}`` and the drawings it shows; no catalogue yet: a page that
    says so."""
    lines = [
        "# Performance",
        "",
        "The committed measurements of `bench/results/`, one section per figure of "
        "`bench/figures.yaml`: what it measures, the command that makes it, its target, "
        "the newest measurement and every earlier one. Each measurement names its date, "
        "CPU, precision and commit; a new one is recorded by its bench "
        "(`bench.measurements.write`).",
        "",
    ]
    if not figures_path.exists():
        lines += [f"No figure catalogue ({code(_where(figures_path))}) yet: nothing to show.", ""]
        return {PAGE: "\n".join(lines)}
    figures, found = load(results, figures_path)
    contents = [f"- [{text(f.title)}](#{slug(f.title)})" for f in figures.values()]
    lines += [*contents, ""]
    files: dict[str, str] = {}
    for figure in figures.values():
        section, drawn = figure_section(figure, [m for m in found if m.figure == figure.id])
        lines += section
        files.update(drawn)
    return {PAGE: "\n".join(lines).rstrip() + "\n", **files}
