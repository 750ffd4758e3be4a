"""The settings a strategy reads, checked against its card when the card loads.

A strategy reads its settings as ``params["lr"]``; a card that lacks one would
fail with a ``KeyError`` in the middle of a run, after the grid's files were
written. What a class needs is known two ways: the built-in card of the class,
or of a built-in class it derives from (a card of ``Tosca`` needs every setting
of ``methods/tosca.yaml``, whose defaults are the paper's complete set), and the
class's own declaration (:attr:`cl_bench.contract.Method.required_settings`),
for a strategy of your own.
"""

from __future__ import annotations

from pathlib import Path

from cl_bench.cards import sources
from cl_bench.cards.card import Card
from cl_bench.cards.places import read_yaml
from cl_bench.errors import UserError


def builtin_needs(methods_dir: Path) -> dict[str, tuple[Path, list[str]]]:
    """``module:Class`` of each built-in method card (in ``methods_dir``) -> (its card,
    its settings)."""
    out = {}
    for path in sorted(methods_dir.glob("*.yaml")):
        raw = read_yaml(path)
        if isinstance(raw.get("strategy"), str) and isinstance(raw.get("defaults"), dict):
            out[raw["strategy"]] = (path, list(raw["defaults"]))
    return out


def needed(cls: type, methods_dir: Path) -> dict[str, list[str]]:
    """Why -> the settings ``cls`` is known to read for that reason (the built-in cards:
    in ``methods_dir``)."""
    builtin = builtin_needs(methods_dir)
    out = {
        f"declared in {cls.__qualname__}.required_settings": list(
            getattr(cls, "required_settings", ())
        )
    }
    for klass in cls.__mro__:
        card = builtin.get(f"{klass.__module__}:{klass.__qualname__}")
        if card is not None:
            out[f"read by {klass.__qualname__}, as its card {card[0]} says"] = card[1]
    return out


def check_needed(card: Card, cls: type, methods_dir: Path) -> None:
    """Refuse a card from outside the package that lacks a setting its strategy reads
    (the built-in cards are the reference, so they are not checked against themselves)."""
    if card.origin == sources.BUILTIN:
        return
    missing, seen = [], set(card.params)
    for why, keys in needed(cls, methods_dir).items():
        lacking = [k for k in dict.fromkeys(keys) if k not in seen]
        seen.update(lacking)
        if lacking:
            missing.append(f"{', '.join(lacking)} ({why})")
    if missing:
        raise UserError(
            f"{card.path}: `defaults:` lacks settings its strategy reads: "
            f"{'; '.join(missing)}. Add each to `defaults:` with its value."
        )
