"""The LaTeX of ``cl-bench report``: one booktabs ``table`` per scenario, rows named by
the methods' card titles, a caption that names the backbone and its weights (random
weights flagged) and the settings every row shares that differ from the card
defaults, and ``\\label{tab:<scenario>}`` to cite it by."""

from __future__ import annotations

import re
from typing import Any

from cl_bench.reporting.captions import Context, titled

_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "–": "--",
    "−": "$-$",
    "Δ": r"$\Delta$",
    "χ²": r"$\chi^2$",
    "α": r"$\alpha$",
}


def escape(text: str) -> str:
    """Escape in one pass, so an inserted escape is never escaped again."""
    return re.sub("|".join(map(re.escape, _TEX)), lambda m: _TEX[m.group()], text)


def label_key(scenario: str) -> str:
    """``tab:<scenario>``, in the characters a LaTeX label keeps as they are."""
    return "tab:" + (re.sub(r"[^A-Za-z0-9:.-]+", "-", scenario).strip("-") or "scenario")


def caption(scenario: str, ctx: Context | None) -> str:
    """The caption of one table, escaped; random weights in bold."""
    text = rf"{escape(scenario)}: mean $\pm$ std over seeds; bold: significantly best ($p<0.05$)."
    if ctx is None:
        return text
    backbone = escape(ctx.backbone[0].upper() + ctx.backbone[1:]) + "."
    if ctx.random:
        backbone = backbone.replace("RANDOM WEIGHTS", r"\textbf{RANDOM WEIGHTS}")
    settings = (
        f" {escape(ctx.settings_text[0].upper() + ctx.settings_text[1:])}." if ctx.shared else ""
    )
    return f"{text} {backbone}{settings}"


def to_latex(
    tables: dict[str, Any],
    contexts: dict[str, Context] | None = None,
    methods: dict[str, list[str]] | None = None,
) -> str:
    """One booktabs ``table`` per entry of ``tables`` (the report's ``Grid``: header,
    rows of (text, bold) cells, notes; needs ``\\usepackage{booktabs}``):
    with ``methods`` (a table's method per row), the rows start with the method's
    title; with ``contexts``, the caption names the backbone and shared settings."""
    contexts, methods = contexts or {}, methods or {}
    out = ["% cl-bench report; needs \\usepackage{booktabs}"]
    for scenario, g in tables.items():
        names = methods.get(scenario) or [None] * len(g.rows)
        out += [
            r"\begin{table}[t]",
            r"\centering",
            r"\footnotesize",
            rf"\caption{{{caption(scenario, contexts.get(scenario))}}}",
            rf"\label{{{label_key(scenario)}}}",
            r"\begin{tabular}{l" + "r" * (len(g.header) - 1) + "}",
            r"\toprule",
            " & ".join(escape(h) for h in g.header) + r" \\",
            r"\midrule",
        ]
        for row, method in zip(g.rows, names, strict=True):
            first = (titled(row[0][0], method) if method else row[0][0], row[0][1])
            out.append(
                " & ".join(
                    rf"\textbf{{{escape(t)}}}" if b else escape(t) for t, b in [first, *row[1:]]
                )
                + r" \\"
            )
        out += [r"\bottomrule", r"\end{tabular}"]
        out += [r"\par\smallskip " + escape(n) for n in g.notes]
        out += [r"\end{table}", ""]
    return "\n".join(out)
