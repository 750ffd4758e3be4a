"""What bench imports of cl-bench beyond its public API, against the list that says why.

bench imports cl-bench's public API (``cl_bench``'s top-level names, ``cl_bench.api``)
and the method contract (``cl_bench.contract``) where it can. Where a bench or a parity
row needs more (a backbone, the feature store, a strategy's own class), the module is a
row of the table "Internals used" in bench/README.md, with the bench files that import
it and why. :func:`problems` compares that table with the imports of every Python file
under bench/ (read with ``ast``, nothing imported), so the list cannot go stale:

    python -m bench.internals           # the table's rows for the imports as they are
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
README = BENCH / "README.md"
PUBLIC = ("cl_bench.api", "cl_bench.contract")
BEGIN, END = "<!-- internals: begin -->", "<!-- internals: end -->"


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _sources() -> list[Path]:
    return sorted(
        p for p in BENCH.rglob("*.py") if not any(part.startswith(".") for part in p.parts)
    )


def imported_modules(path: Path) -> set[str]:
    """The cl_bench modules ``path`` imports (``from cl_bench.engine import runner``:
    cl_bench.engine.runner; ``from cl_bench.engine.runner import execute``:
    cl_bench.engine.runner)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if _is_module(sub) else node.module)
    return {m for m in found if m == "cl_bench" or m.startswith("cl_bench.")}


def internal(module: str) -> bool:
    """Whether ``module`` is beyond the public API and the contract."""
    return module != "cl_bench" and not any(
        module == p or module.startswith(p + ".") for p in PUBLIC
    )


def used() -> dict[str, list[str]]:
    """Every internal cl_bench module bench imports, with the bench files that import it
    (paths under bench/)."""
    out: dict[str, list[str]] = {}
    for path in _sources():
        for module in imported_modules(path):
            if internal(module):
                out.setdefault(module, []).append(str(path.relative_to(BENCH)))
    return {m: sorted(out[m]) for m in sorted(out)}


def listed(text: str | None = None) -> dict[str, tuple[list[str], str]]:
    """The README table's rows: module -> (the files it names, why)."""
    text = README.read_text(encoding="utf-8") if text is None else text
    if BEGIN not in text or END not in text:
        return {}
    rows = {}
    for line in text.split(BEGIN, 1)[1].split(END, 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`cl_bench"):
            continue
        files = re.findall(r"`([^`]+)`", cells[1])
        rows[cells[0].strip("`")] = (files, cells[2])
    return rows


def problems(text: str | None = None) -> list[str]:
    """What the README table and bench's imports disagree on (empty: they agree)."""
    have, say = used(), listed(text)
    out = [f"{m} is imported by {', '.join(have[m])} but not listed" for m in have if m not in say]
    out += [f"{m} is listed but bench no longer imports it" for m in say if m not in have]
    for m in set(have) & set(say):
        files, why = say[m]
        if sorted(files) != have[m]:
            out.append(f"{m}: listed as used by {files}, imported by {have[m]}")
        if not why:
            out.append(f"{m}: the row does not say why")
    return out


def table(whys: dict[str, str] | None = None) -> str:
    """The table's rows for bench's imports as they are, with the whys given."""
    whys = whys or {}
    lines = ["| module | used by | why |", "|---|---|---|"]
    for module, files in used().items():
        names = ", ".join(f"`{f}`" for f in files)
        lines.append(f"| `{module}` | {names} | {whys.get(module, '')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table({m: why for m, (_, why) in listed().items()}))
    found = problems()
    print("\n".join(found) or "the table in bench/README.md is current", file=sys.stderr)
    sys.exit(1 if found else 0)
