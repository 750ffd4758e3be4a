"""What cl-bench knows and holds, without running a method: the cards and backbones
(``cl-bench list``), extra card folders, parameter and FLOP counts (``cl-bench account``),
a scenario's data checked (``cl-bench data check``) and the feature cache
(``cl-bench cache``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from cl_bench import arguments
from cl_bench.errors import UserError, refuse_long_names

__all__ = ["account", "account_table", "cache", "cards", "check_data", "listing"]


@contextlib.contextmanager
def cards(folders: Iterable[str | Path] = ()) -> Iterator[list[str]]:
    """Within the block, the card folders ``folders`` count beside the built-in cards,
    ``CL_BENCH_CARDS`` and installed packages' cards (``--cards``). Yields one paragraph
    per installed package whose cards cannot be read (its cards are left out)."""
    from cl_bench.cards.sources import added, broken_entry_points
    from cl_bench.errors import name_too_long

    paths = [Path(p) for p in arguments.strings("folders", list(map(str, folders)), '["cards"]')]
    try:
        with added(paths):
            yield broken_entry_points()
    except OSError as e:  # a name too long, in the folders or in the block, is a UserError
        error = name_too_long(e)
        if error is None:
            raise
        raise error from None


LISTS = ("methods", "scenarios", "backbones", "suites")


@refuse_long_names
def listing(what: str) -> tuple[list[str], list[str]]:
    """``cl-bench list``: one line per known method, scenario, backbone or suite (a card's line
    ends with where it comes from), and one paragraph per card that cannot be read (a
    broken card does not hide the others)."""
    from cl_bench.backbones import BACKBONES
    from cl_bench.backbones.vit import PINNED_TAGS
    from cl_bench.cards.catalogue import load_method, load_scenario, method_names, scenario_names
    from cl_bench.cards.declared import declared
    from cl_bench.cards.sources import BUILTIN, broken_entry_points
    from cl_bench.cards.strategy import strategy_of
    from cl_bench.errors import unknown

    if what == "backbones":
        pinned = "ImageNet-1k, offline (PyPI package)"
        return [f"{n:26s} {k:4s} {PINNED_TAGS.get(n, pinned)}" for n, k in BACKBONES.items()], []
    if what not in LISTS:
        raise unknown("list target", what, list(LISTS))
    if what == "suites":
        from cl_bench.api.suites import suite_lines

        return suite_lines()
    methods = what == "methods"
    names, load = (method_names, load_method) if methods else (scenario_names, load_scenario)
    lines, bad = [], broken_entry_points()
    listed = names()
    w = max([14, *map(len, listed)])  # the name column: as wide as the longest name
    for name in listed:
        try:
            card = load(name)
        except UserError as e:
            bad.append(e.paragraph())
            continue
        p, raw = card.params, card.raw
        origin = card.origin if card.origin == BUILTIN else f"{card.origin}: {card.path}"
        said = declared(strategy_of(card)) if methods else {}
        lines.append(
            f"{name:{w}s} {card.title:12s} backbones: {said.get('backbones'):4s}"
            f"  inputs: {said.get('inputs'):9s}"
            f"{'  (default run)' if raw.get('default_run') else ''}"
            f"{'  tune: ' + ','.join(raw['search']) if raw.get('search') else ''}  ({origin})"
            if methods
            else f"{name:{w}s} {card.title}  [init {p['init_cls']}, +{p['increment']}]  ({origin})"
        )
    return lines, bad


@refuse_long_names
def account(
    methods: str | Sequence[str] = ("tosca", "simplecil"),
    *,
    tasks: int = 10,
    classes: int = 200,
    backbone: str = "vit_base_patch16_224",
    weights: str | None = None,
    image_size: int | None = None,
    progress: bool = False,
    every_task: bool = False,
) -> list[dict[str, Any]]:
    """``cl-bench account``: per method, the parameters it trains, adds per task and
    stores, and its inference and training GFLOPs, at the end of a ``tasks``-task stream
    of ``classes`` classes, without data or training (random weights by default: the
    counts do not depend on the weights' values). Where a method declares that its tasks
    repeat, the first ones run and the counts are carried exactly to the last task (each
    row's ``tasks_run``); ``every_task`` runs every task instead."""
    from cl_bench.backbones import backbone_kind
    from cl_bench.cards.catalogue import load_method
    from cl_bench.engine.account import account as count
    from cl_bench.input_checks import check_image_size

    method_list = arguments.methods(methods)
    for name in method_list:  # every name checked before the first method is counted
        load_method(name)
    name = arguments.text("backbone", backbone, 'backbone="vit_base_patch16_224"')
    size = arguments.whole("image_size", image_size, "image_size=224", optional=True)
    check_image_size(name, backbone_kind(name), size)  # as `run` checks it
    return count(
        method_list,
        name,
        arguments.text("weights", weights, 'weights="random"', optional=True, path=True),
        arguments.whole("tasks", tasks, "tasks=10") or 0,
        arguments.whole("classes", classes, "classes=200") or 0,
        size,
        arguments.flag("progress", progress),
        arguments.flag("every_task", every_task),
    )


def account_table(rows: list[dict[str, Any]]) -> str:
    """:func:`account`'s rows as the table ``cl-bench account`` prints."""
    from cl_bench.engine.account import account_table as table

    return table(rows)


@refuse_long_names
def check_data(
    scenario: str, data_root: str | Path | None = None, progress: bool = False
) -> tuple[list[str], bool]:
    """``cl-bench data check``: a scenario's data counted against the expected numbers,
    its links and every image decoded. Returns the report's lines and whether all is as
    expected; missing data is a UserError whose message shows the expected tree."""
    from cl_bench.cards.catalogue import load_scenario
    from cl_bench.scenarios.data_check import check_data as check

    return check(
        load_scenario(arguments.text("scenario", scenario, 'scenario="imagenet-a"')),
        arguments.folder("data_root", data_root, 'data_root="~/data"', optional=True),
        arguments.flag("progress", progress),
    )


@refuse_long_names
def cache(action: str) -> list[str]:
    """``cl-bench cache info``: one line per cached feature array and the totals;
    ``cache clear``: removes them (a later run computes them again)."""
    from cl_bench.errors import unknown
    from cl_bench.store.feature_cache import cache_clear, cache_info

    if action == "info":
        return cache_info()
    if action == "clear":
        return [f"removed {cache_clear()} cached feature arrays"]
    raise unknown("cache action", action, ["info", "clear"])
