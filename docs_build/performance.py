"""The performance page: per figure of ``bench/figures.yaml``, what it measures, how to
make it, its target, the newest measurement's headline rows and the history below.

The measurements are ``bench/results/*.json`` read through :mod:`bench.measurements`
(its docstring is the schema); a file that does not follow it stops the build, named.
"""

from __future__ import annotations

from pathlib import Path

from bench import measurements
from docs_build import DocsError
from docs_build.md import code, slug, table, text

PAGE = "performance.md"


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


def figure_section(figure: measurements.Figure, found: list[measurements.Measurement]) -> list[str]:
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
        return [*lines, "No measurement yet.", ""]
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
    lines += ["### History", "", "Newest first; compare values within one CPU.", ""]
    lines += table(
        ["date", "CPU", "precision", "commit", "headline"],
        [(m.date, text(m.cpu), text(m.precision), code(m.commit), _headline(m)) for m in found],
    )
    return lines


def performance_page(
    results: Path = measurements.RESULTS, figures_path: Path = measurements.FIGURES
) -> dict[str, str]:
    """``{performance.md: ...}``; no catalogue yet: a page that says so."""
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
    for figure in figures.values():
        lines += figure_section(figure, [m for m in found if m.figure == figure.id])
    return {PAGE: "\n".join(lines).rstrip() + "\n"}
