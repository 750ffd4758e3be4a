"""Small Markdown writers shared by the page builders: escaped text, tables, code blocks."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

# characters that Markdown would read as markup in prose: backslash-escaped where
# Python-Markdown knows the escape, else written as HTML entities (a pipe would split a
# table cell, a "<" open an HTML tag)
_SPECIAL = re.compile(r"[\\*_\[\]#|<]")
_ESCAPES = {"|": "&#124;", "<": "&lt;"}
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj):`~?([^`]+)`")  # as griffe_roles


def text(value: object) -> str:
    """``value`` as Markdown prose: markup characters escaped outside `code spans`, which
    are kept (the cards write commands and file names that way)."""
    s = " ".join(str(value).split())
    out, pos = [], 0
    for m in _CODE_SPAN.finditer(s):
        out.append(_escape(s[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_escape(s[pos:]))
    return "".join(out)


def _escape(prose: str) -> str:
    return _SPECIAL.sub(lambda m: _ESCAPES.get(m.group(0), "\\" + m.group(0)), prose)


def code(value: object) -> str:
    """``value`` as an inline code span (one that holds backticks uses a longer fence)."""
    s = " ".join(str(value).split())
    fence = "``" if "`" in s else "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def table(
    header: Sequence[str], rows: Iterable[Sequence[str]], align: Sequence[str] | None = None
) -> list[str]:
    """A Markdown table; cells are Markdown already (use :func:`text` / :func:`code`)."""
    marks = {"l": "---", "r": "--:", "c": ":-:"}
    align = align or ["l"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    lines += ["| " + " | ".join(c.replace("\n", " ") for c in row) + " |" for row in rows]
    return lines + [""]


def block(body: str, lang: str = "") -> list[str]:
    """A fenced code block, its fence longer than any backtick run inside."""
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{lang}", body.rstrip("\n"), fence, ""]


def role_to_code(doc: str) -> str:
    """Sphinx roles (``:mod:`x```, ``:func:`~a.b```) as code spans of the name."""
    return _ROLE.sub(r"`\1`", doc)


def docstring(doc: str) -> list[str]:
    """A module docstring (reST-flavoured plain text) as Markdown: roles such as
    ``:mod:`x``` become code spans, ``::`` ends a sentence, indented blocks stay code
    blocks, prose is escaped."""
    lines: list[str] = []
    in_block = False
    for raw in doc.strip("\n").splitlines():
        line = role_to_code(raw.rstrip())
        if not line:
            lines.append("")
            continue
        indented = line.startswith("    ")
        if indented and (in_block or not lines or not lines[-1]):
            in_block = True
            lines.append(line)
            continue
        in_block = False
        if line.endswith("::"):
            line = line[:-1]
        lead = len(line) - len(line.lstrip())
        bullet = re.match(r"(\s*[-*] )(.*)", line)
        if bullet:
            lines.append(bullet.group(1).replace("*", "-") + text(bullet.group(2)))
        else:
            lines.append(" " * min(lead, 3) + text(line))
    return lines + [""]


def slug(name: str) -> str:
    """The anchor mkdocs' table of contents gives a heading of ``name`` (Python-Markdown's
    default slugify: ASCII, punctuation dropped, lower case, spaces to dashes), for links
    into generated pages."""
    s = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    s = re.sub(r"[^\w\s-]", "", s).strip().lower()
    return re.sub(r"[-\s]+", "-", s)
