"""The package's layers, read from the imports: every import in cl_bench/ points to its
own layer or one below (docs/architecture.md lists the layers, top first), no module
imports itself back through others, and strategies/ holds methods apart from their
building blocks. Every import counts: at module level, inside a function, and under
``TYPE_CHECKING``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cl_bench"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def layers() -> list[list[str]]:
    """The layers of docs/architecture.md's "Layers" block, bottom first: each a list
    of units (a subpackage or a top-level module of cl_bench; ``cl_bench``: the root)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = re.search(r"^## Layers\n.*?^```\n(.*?)^```", text, re.S | re.M)
    assert block, "docs/architecture.md has no ## Layers section with a ``` block"
    rows = [line.split("#")[0].split() for line in block.group(1).splitlines()]
    return [row for row in rows if row][::-1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every cl_bench module ``path`` imports."""
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if is_module(f"{target}.{a.name}")]
            found += [(node.lineno, m) for m in subs] or [(node.lineno, target)]
    return [(line, m) for line, m in found if m == "cl_bench" or m.startswith("cl_bench.")]


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "cl_bench"


def graph() -> dict[str, list[tuple[int, str]]]:
    return {module_name(p): imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_unit_has_one_layer():
    listed = [u for layer in layers() for u in layer]
    assert len(listed) == len(set(listed)), f"a unit is listed twice: {listed}"
    present = {unit(m) for m in graph()}
    assert present == set(listed), (
        f"not in docs/architecture.md: {present - set(listed)}; "
        f"listed but absent: {set(listed) - present}"
    )


def test_every_import_points_to_its_layer_or_below():
    level = {u: i for i, layer in enumerate(layers()) for u in layer}
    upward = [
        f"{m} (line {line}) imports {target}: layer {unit(target)} is above {unit(m)}"
        for m, found in graph().items()
        for line, target in found
        if level[unit(target)] > level[unit(m)]
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    edges = {m: {t for _, t in found if t != m} for m, found in graph().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:  # Tarjan's strongly connected components
        index[m] = low[m] = len(index)
        stack.append(m)
        for t in edges.get(m, ()):
            if t not in index:
                visit(t)
                low[m] = min(low[m], low[t])
            elif t in stack:
                low[m] = min(low[m], index[t])
        if low[m] == index[m]:
            component = []
            while True:
                t = stack.pop()
                component.append(t)
                if t == m:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for m in sorted(edges):
        if m not in index:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_strategies_holds_methods_and_blocks_apart():
    """A module directly in strategies/ is a method: a built-in card names its class.
    Everything a method is built from sits in strategies/blocks/."""
    named = {
        yaml.safe_load(p.read_text())["strategy"].partition(":")[0]
        for p in (ROOT / "methods").glob("*.yaml")
    }
    top = {
        f"cl_bench.strategies.{p.stem}"
        for p in (PACKAGE / "strategies").glob("*.py")
        if p.stem != "__init__"
    }
    assert top == named, (
        f"not methods: {sorted(top - named)}; methods elsewhere: {sorted(named - top)}"
    )


def test_commands_are_a_thin_layer_over_the_api():
    """The CLI holds only Typer definitions: a module of cl_bench/commands imports nothing of
    cl-bench but the Python API (cl_bench.api, whose package re-exports every function) and
    its sibling command modules, and no module there is over 200 lines."""
    beyond = [
        f"{m} (line {line}) imports {target}"
        for m, found in graph().items()
        if unit(m) == "commands"
        for line, target in found
        if target != "cl_bench.api" and not target.startswith("cl_bench.commands")
    ]
    assert not beyond, "\n".join(beyond)
    long = {
        p.name: n
        for p in (PACKAGE / "commands").glob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 200
    }
    assert not long, f"command modules over 200 lines: {long}"
