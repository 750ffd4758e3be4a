"""The one plain-text table printer of the commands (run summary, status, account,
check)."""

from __future__ import annotations

from collections.abc import Container, Sequence


def text_table(
    rows: Sequence[Sequence[str]],
    right: Container[int] = (),
    rule: bool = True,
    free_last: bool = False,
) -> list[str]:
    """The lines of a table whose first row is the header: columns two spaces apart,
    each as wide as its widest cell, left-aligned except the columns (indices) in
    ``right``; ``rule``: a dashed line under the header; ``free_last``: the last column
    is free text, neither padded nor counted in the widths. No line ends in spaces."""
    padded = len(rows[0]) - 1 if free_last else len(rows[0])
    widths = [max(len(row[i]) for row in rows) for i in range(padded)]
    lines = [
        "  ".join(
            [
                *(
                    c.rjust(w) if i in right else c.ljust(w)
                    for i, (c, w) in enumerate(zip(row[:padded], widths, strict=True))
                ),
                *row[padded:],
            ]
        ).rstrip()
        for row in rows
    ]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return lines
