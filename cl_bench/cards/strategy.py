"""The strategy class a method card names, resolved through the contract: the class
itself when it declares its :class:`~cl_bench.contract.Method` contract, or, for a
plain Avalanche strategy, that class under the card's ``contract:`` block
(:mod:`cl_bench.contract.plain`)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from cl_bench.cards import sources
from cl_bench.cards.card import Card
from cl_bench.cards.foreign import MissingModule, contained, import_module
from cl_bench.contract import spec_of
from cl_bench.errors import UserError


def make_importable(card: Card) -> None:
    """A method card from outside the package may name a module that sits beside it
    (``strategy: my_method:MyMethod`` next to ``my_method.py``): its folder goes at the
    end of ``sys.path`` (so it shadows nothing installed), for the rest of the process.
    A worker process that receives the card calls this before importing its strategy."""
    folder = str(card.path.parent.resolve())
    if card.origin != sources.BUILTIN and folder not in sys.path:
        sys.path.append(folder)


def strategy_of(card: Card) -> type:
    """The class the runner drives for a method card: the one its ``strategy:`` names,
    or, for a plain Avalanche strategy, that class under the card's ``contract:``
    block (:mod:`cl_bench.contract.plain`)."""
    return strategy_class(
        card.path,
        card.raw["strategy"],
        card.raw.get("contract"),
        card.raw["defaults"],
        card.raw.get("backbones", "any"),
    )


def strategy_class(
    path: Path,
    spec: Any,
    contract: Any = None,
    defaults: dict | None = None,
    backbones: Any = "any",
) -> type:
    """The class a card's ``strategy: package.module:Class`` names (with its card's
    ``contract:`` block and ``defaults``, when it has one), or the card's error."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise UserError(f'{path}: `strategy:` must be "package.module:Class", not {spec!r}.')
    module, attr = spec.split(":")
    fix = "Fix the module or the card's `strategy:`; the other cards are not affected."
    try:
        with contained(f"{path}: importing strategy {spec}", fix):
            found = import_module(module)
    except MissingModule as e:
        raise UserError(
            f"{path}: strategy {spec} cannot be imported: no module named "
            f"{e.name!r}. Fix `strategy:` in the card (a module is found among "
            "the installed packages, or beside a card from outside the package: "
            f"{path.parent / e.name.split('.')[0]}.py)."
        ) from None
    with contained(f"{path}: reading {attr} of strategy module {module}", fix):
        obj = getattr(found, attr, None)
    if obj is None:
        raise UserError(
            f"{path}: strategy {spec}: module {module} has no {attr!r}. Fix "
            "`strategy:` in the card."
        )
    if not isinstance(obj, type):
        raise UserError(
            f"{path}: strategy {spec} is a {type(obj).__name__}, not a class. "
            "Name the strategy class in `strategy:`."
        )
    if contract is not None:  # imported here: Avalanche's training stack, only when needed
        from cl_bench.contract.plain import driven_class

        with contained(f"{path}: importing the `contract:` model factory", fix):
            return driven_class(obj, contract, defaults or {}, path, import_object, backbones)
    spec_of(obj, card=path)  # refuses a class that declares no method contract
    return obj


def import_object(spec: str) -> Any:
    """``"package.module:Name"`` -> the object."""
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)
