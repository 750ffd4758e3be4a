"""The identity of the code a run executes, so that a result is reused only for the code
that made it.

A run's code is the source files it imports that are not installed packages: cl-bench's
own modules that the runner reaches (``cl_bench.engine.runner`` and what it imports,
directly or not, with every package ``__init__`` on the way, but no method's module),
the method's strategy module and its bases' modules, and the files those import in
turn, found by reading their import statements (function-level ones included).
Installed packages (torch, timm, Avalanche...) are identified by their versions
instead, which every record keeps (``env.packages``). Other strategies' modules are not
part of a method's code, nor are the layers that only read results (reporting,
commands, api).

A file's digest is taken over its syntax tree without docstrings, so comments,
docstrings, blank lines and formatting never make a result stale; any other edit does,
including a changed message string. Files are named relative to the folder above
``cl_bench`` (``cl_bench/engine/runner.py``) so that a moved checkout keeps its results,
and by absolute path otherwise (a method beside its card).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path

PACKAGE = "cl_bench"
PACKAGE_DIR = Path(__file__).resolve().parent
ROOT = PACKAGE_DIR.parent  # cl_bench's files are named relative to this folder
RUNNER = PACKAGE_DIR / "engine" / "runner.py"
STRATEGIES = PACKAGE_DIR / "strategies"
MISSING = "missing"  # the digest of a file that is gone or no longer parses


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:]
    return tree


@lru_cache(maxsize=4096)
def _digest(path: str, mtime_ns: int, size: int) -> tuple[str, tuple[str, ...]]:
    """(digest, imported module names) of a source file as it is on disk at that
    modification time and size."""
    del mtime_ns, size  # the cache key: an edited file is read again
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return MISSING, ()
    names = []
    package = _package_of(Path(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            if base:
                names.append(base)
                names += [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
    dump = ast.dump(_strip_docstrings(tree), annotate_fields=False)
    return hashlib.sha256(dump.encode()).hexdigest()[:16], tuple(names)


def _stat_key(path: Path) -> tuple[str, int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return str(path), -1, -1
    return str(path), st.st_mtime_ns, st.st_size


def file_digest(path: Path) -> str:
    """The digest of ``path`` as it is now (:data:`MISSING` when gone or unparsable)."""
    key = _stat_key(path)
    return MISSING if key[1] < 0 else _digest(*key)[0]


def _package_of(path: Path) -> str:
    """The dotted package a source file sits in (for relative imports), from the
    ``__init__.py`` files above it."""
    parts: list[str] = []
    folder = path.parent
    while (folder / "__init__.py").exists():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".") if package else []
    if node.level - 1 > len(parts):
        return ""
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


PACKAGE_FOLDERS = {"site-packages", "dist-packages"}  # where installers put packages


@lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    """The standard library's folders (of this environment and of the Python it was
    made from) and this environment's package folders."""
    roots = set()
    for base in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        paths = sysconfig.get_paths(
            vars={
                "base": base,
                "platbase": base,
                "installed_base": base,
                "installed_platbase": base,
            }
        )
        roots |= {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(sorted(str(Path(r).resolve()) for r in roots))


def _is_installed(path: Path) -> bool:
    """In the standard library or an installed package: in a ``site-packages`` or
    ``dist-packages`` folder of any environment (another one's packages on ``sys.path``
    too), or under one of :func:`_installed_roots`."""
    text = str(path)
    return bool(PACKAGE_FOLDERS & set(path.parts)) or any(
        text == root or text.startswith(root + os.sep) for root in _installed_roots()
    )


def _is_project(path: Path) -> bool:
    """cl-bench's own files (installed or not) and any file outside the installed
    packages and the standard library."""
    return path.is_relative_to(PACKAGE_DIR) or not _is_installed(path)


@lru_cache(maxsize=1024)
def _top_folder(top: str) -> Path | None:
    """The folder holding module ``top``'s files, when it is source code of the project
    (cl-bench, or a module that is not an installed package); None otherwise."""
    if top == PACKAGE:
        return ROOT
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.has_location:
        return None
    origin = Path(spec.origin).resolve()
    if _is_installed(origin):
        return None
    return origin.parent.parent if spec.submodule_search_locations else origin.parent


def _files_of(name: str) -> list[Path]:
    """The source files importing ``name`` executes (its packages' ``__init__.py`` and
    the module itself) that belong to the project; [] for installed or unknown modules."""
    parts = name.split(".")
    folder = _top_folder(parts[0])
    if folder is None:
        return []
    found = []
    for depth in range(1, len(parts) + 1):
        base = folder.joinpath(*parts[:depth])
        for candidate in (base / "__init__.py", base.with_suffix(".py")):
            if candidate.is_file():
                found.append(candidate.resolve())
                break
    return found


def _strategy_module(path: Path) -> bool:
    """A method's module, ``cl_bench/strategies/<name>.py`` (not a building block of
    ``strategies/blocks/``)."""
    return path.parent == STRATEGIES and path.name != "__init__.py"


def closure(starts: Iterable[Path], strategies: bool = True) -> list[Path]:
    """The project source files that ``starts`` execute when imported, ``starts``
    included; without ``strategies``, the methods' own modules are not followed (what
    the runner reaches of them by name is not a given method's code)."""
    seen: set[Path] = set()
    todo = [Path(p).resolve() for p in starts]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        key = _stat_key(path)
        if key[1] < 0:
            continue
        for name in _digest(*key)[1]:
            todo += [
                f
                for f in _files_of(name)
                if f not in seen and (strategies or not _strategy_module(f))
            ]
    return sorted(seen)


def label(path: Path) -> str:
    """How a record names a file: relative to the folder above ``cl_bench`` for
    cl-bench's own files, absolute for any other."""
    path = Path(path).resolve()
    try:
        rel = path.relative_to(PACKAGE_DIR)
    except ValueError:
        return str(path)
    return str(Path(PACKAGE) / rel)


def located(name: str) -> Path:
    """The file a record's name stands for, in the cl-bench that runs now."""
    return ROOT / name if not os.path.isabs(name) else Path(name)


def class_files(cls: type) -> list[Path]:
    """The source files of a class and of its bases, that are project code."""
    files = []
    for klass in cls.__mro__:
        module = sys.modules.get(klass.__module__)
        origin = getattr(module, "__file__", None)
        if origin and origin.endswith(".py") and _is_project(Path(origin).resolve()):
            files.append(Path(origin))
    return files


def digest_of(modules: Mapping[str, str]) -> str:
    blob = "\n".join(f"{name} {digest}" for name, digest in sorted(modules.items()))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def code_block(strategy: type) -> dict:
    """A record's ``code``: the digest of each source file the run of ``strategy``
    executes, and one digest over them all."""
    files = {*closure([RUNNER], strategies=False), *closure(class_files(strategy))}
    modules = {label(f): file_digest(f) for f in sorted(files)}
    return {"digest": digest_of(modules), "modules": modules}


def changes(modules: Mapping[str, str]) -> list[str]:
    """The files of a record's ``code`` whose source differs now (``edited``), or that
    are gone or no longer parse (``missing``), as ``name (edited)``; [] when the same."""
    out = []
    for name, recorded in sorted(modules.items()):
        now = file_digest(located(name))
        if now != recorded:
            out.append(f"{name} ({'missing' if now == MISSING else 'edited'})")
    return out
