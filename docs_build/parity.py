"""The parity page (``bench/parity.md``'s text, made by its own renderer from
``bench/parity/results/*.json``) and the parity row a method page shows."""

from __future__ import annotations

from pathlib import Path

from bench.parity import render, schema
from docs_build import ROOT, DocsError
from docs_build.md import code, slug, table, text

PAGE = "parity.md"


def load_results(folder: Path = schema.RESULTS) -> list[dict]:
    """Every parity results file, checked by the parity schema (a bad one stops the build)."""
    try:
        return schema.load_all(folder)
    except schema.ResultsError as e:
        raise DocsError(f"parity results: {e}") from None


def parity_page(results: list[dict]) -> dict[str, str]:
    """The page is exactly what ``python -m bench.parity.render`` writes to
    ``bench/parity.md``; its ``## <method>`` headings are the anchors method pages link."""
    return {PAGE: render.render(results)}


def anchor(method: str) -> str:
    """The anchor of a method's section on the parity page (its ``## method`` heading)."""
    return slug(method)


def results_path(method: str, folder: Path = schema.RESULTS) -> str:
    path = folder / f"{method}.json"
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def parity_row(data: dict, link: str, folder: Path = schema.RESULTS) -> list[str]:
    """A method page's parity section: the step check and the paired seeds as the parity
    page's summary row writes them (its own cell functions), and where to read more."""
    paired, ref = data["paired"], data["reference"]
    rows = [
        (
            "Reference",
            text(
                f"{ref['repo']} at {ref['commit'][:7]}"
                + (f": {ref['what']}" if ref.get("what") else "")
            ),
        ),
        ("Step check: params / loss / logits (bound)", text(render._step_cell(data))),
        ("Paired seeds", text(f"{paired['n_seeds']} seeds, {paired['pairing']}")),
        ("Average accuracy, cl-bench - reference [95 % CI]", text(render._ci(paired["avg"]))),
        ("Last accuracy, cl-bench - reference [95 % CI]", text(render._ci(paired["last"]))),
        ("Verdict", f"**{data['verdict']}**"),
    ]
    lines = table(["Check", "Result"], rows)
    if data["verdict"] == "differs" and data.get("why"):
        lines += [f"Why it differs: {text(data['why'])}", ""]
    lines += [
        f"The whole row, per seed and with every difference kept: "
        f"[Parity: {data['method']}]({link}#{anchor(data['method'])}); the results file "
        f"is {code(results_path(data['method'], folder))}.",
        "",
    ]
    return lines
