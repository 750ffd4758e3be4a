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
may come from one source only (:func:`cl_bench.cards.config.card_index` refuses a clash):
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

from cl_bench.errors import UserError

BUILTIN = "built-in"
ENV = "CL_BENCH_CARDS"
GROUP = "cl_bench.cards"

_added: list[Path] = []  # the --cards folders of the running command


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
        raise UserError(f"--cards {', '.join(missing)}: no such folder. Give a folder that "
                        "holds card YAML files (methods: `strategy:`, scenarios: `dataset:`).")
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
            raise UserError(f"{ENV} names {text}, which is not a folder. Fix {ENV} (folders "
                            f"of card YAML, separated by {os.pathsep!r}) or unset it.")
        found.append(Source(folder, ENV))
    return found + [Source(folder, "--cards") for folder in _added]


def entry_point_sources() -> list[Source]:
    """One source per entry point of group ``cl_bench.cards``."""
    out = []
    for ep in sorted(importlib.metadata.entry_points(group=GROUP), key=lambda e: e.name):
        where = f'entry point "{ep.name}" ({ep.value}) of group {GROUP}'
        try:
            target = ep.load() if ep.attr else importlib.resources.files(ep.module)
        except (ImportError, AttributeError) as e:
            raise UserError(f"The {where} cannot be loaded: {e}. Reinstall or fix the package "
                            "that declares it.") from None
        folder = Path(str(target))
        if not folder.is_dir():
            raise UserError(f"The {where} names {folder}, which is not a folder of cards. "
                            "Fix the package that declares it.")
        out.append(Source(folder, f"entry point {ep.name}"))
    return out
