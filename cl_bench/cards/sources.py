"""Where cards come from: the package's own, installed packages', and folders named
by ``CL_BENCH_CARDS`` and ``--cards``.

Built-in cards are the package data ``cl_bench/_cards/{methods,benchmarks,baselines}``
of an installed cl-bench (read through :mod:`importlib.resources`); the package run
from a checkout (editable install, ``PYTHONPATH``) has no such copy and reads the
checkout's ``methods/``, ``benchmarks/`` and ``results/baselines/``, their one source.

Other cards come, in this order, from

- installed packages: an entry point in group ``cl_bench.cards`` names a package
  whose folder holds card YAML (``my_cards = "mypkg.cards"``), or an object that is
  a path to such a folder (``my_cards = "mypkg:CARDS_DIR"``);
- ``CL_BENCH_CARDS``: folders separated by ``os.pathsep``;
- ``--cards DIR`` of the running command (repeatable, or a comma list).

In such a folder a YAML with ``strategy:`` is a method card, with ``dataset:`` a
scenario card, with ``runs:`` a suite. A card's name is its file name, and a name
may come from one source only (:func:`cl_bench.cards.catalogue.card_index` refuses a clash):
result files are keyed by method and scenario name, so two cards of one name would
share, and skip, each other's runs.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.resources
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cl_bench.cards.foreign import contained
from cl_bench.errors import UserError

BUILTIN = "built-in"
ENV = "CL_BENCH_CARDS"
GROUP = "cl_bench.cards"

_added: list[Path] = []  # the --cards folders of the running command
# entry point ("name=value") -> why it cannot be loaded: a failed import is not tried
# again in this process, or every card lookup would run the package's code again
_broken: dict[str, str] = {}


@dataclass(frozen=True)
class Source:
    """A folder of cards. ``kind``: ``methods`` or ``benchmarks`` for the built-in
    folders (every file is of that kind); None: each file says by its keys."""

    folder: Path
    origin: str
    kind: str | None = None


def packaged() -> Path | None:
    """The cards shipped inside the installed package, or None when the package
    runs from a checkout (its ``methods/`` and ``benchmarks/`` are the cards)."""
    cards = importlib.resources.files("cl_bench") / "_cards"
    return cards if isinstance(cards, Path) and cards.is_dir() else None


@contextmanager
def added(folders: list[Path]) -> Iterator[None]:
    """The ``--cards`` folders count for the block (one command), then no longer."""
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise UserError(
            f"--cards {', '.join(missing)}: no such folder. Give a folder that "
            "holds card YAML files (methods: `strategy:`, scenarios: `dataset:`)."
        )
    before = list(_added)
    _added[:] = folders
    try:
        yield
    finally:
        _added[:] = before


def extra_sources() -> list[Source]:
    """Entry points, then ``CL_BENCH_CARDS``, then ``--cards``."""
    found = [*entry_point_sources()]
    for text in filter(None, os.environ.get(ENV, "").split(os.pathsep)):
        folder = Path(text).expanduser()
        if not folder.is_dir():
            raise UserError(
                f"{ENV} names {text}, which is not a folder. Fix {ENV} (folders "
                f"of card YAML, separated by {os.pathsep!r}) or unset it."
            )
        found.append(Source(folder, ENV))
    return found + [Source(folder, "--cards") for folder in _added]


def entry_point_sources() -> list[Source]:
    """One source per entry point of group ``cl_bench.cards`` that loads; one that does
    not (its package raises, has a syntax error, calls ``sys.exit``, names no folder)
    is left out and named by :func:`broken_entry_points`, so that it costs its own
    cards only, not every command."""
    return _scan()[0]


def _scan() -> tuple[list[Source], list[str]]:
    """(sources, paragraphs of the broken ones) over the entry points declared now."""
    out, broken = [], []
    for ep in sorted(importlib.metadata.entry_points(group=GROUP), key=lambda e: e.name):
        key = f"{ep.name}={ep.value}"
        if key not in _broken:
            try:
                out.append(Source(entry_point_folder(ep), f"entry point {ep.name}"))
                continue
            except UserError as e:
                _broken[key] = e.paragraph()
        broken.append(_broken[key])
    return out, broken


def entry_point_folder(ep: importlib.metadata.EntryPoint) -> Path:
    """The folder of cards an entry point names, or the paragraph that says why not."""
    where = f'The entry point "{ep.name}" ({ep.value}) of group {GROUP}'
    fix = "Fix or reinstall the package that declares it, or uninstall it."
    with contained(f"{where}: importing it", fix):
        target = ep.load() if ep.attr else importlib.resources.files(ep.module)
    folder = Path(str(target))
    if not folder.is_dir():
        raise UserError(f"{where} names {folder}, which is not a folder of cards. {fix}")
    return folder


def broken_entry_points() -> list[str]:
    """One paragraph per card entry point that cannot be loaded (see
    :func:`entry_point_sources`); ``cl-bench list`` shows them, and an unknown card
    name points at them (the card may be in one)."""
    return _scan()[1]


def broken_note() -> str:
    """For an unknown card name: the packages whose cards could not be read."""
    broken = broken_entry_points()
    return f" Not read (the card may be there): {' '.join(broken)}" if broken else ""
