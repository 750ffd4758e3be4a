"""Search spaces of ``cl-bench tune``: a method card's ``search:`` block, or ``--space``
items on the command line, checked against the card's settings and rules.

In a card::

    search:                                  # cl-bench tune's space when --space names none
      lr: {low: 0.0001, high: 0.1, log: true}    # a number between low and high (log scale)
      epochs: {low: 1, high: 20}                 # whole numbers when the setting is whole
      optimizer: [sgd, adam]                     # one of these values

On the command line (each item replaces the card's entry for its setting)::

    --space tosca.lr=1e-4..1e-1:log --space tosca.epochs=1..20 --space tosca.optimizer=sgd|adam

A dimension is a setting of the card's ``defaults``; a range takes the setting's type
(whole or real), stays inside the card's ``bounds`` and ``positive`` rules, and a list of
values holds values the setting accepts (its ``choices`` when it has them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import yaml

from cl_bench.cards.card import Card
from cl_bench.errors import UserError, suggest

SPACE_EXAMPLE = "--space tosca.lr=1e-4..1e-1:log, --space tosca.epochs=1..20 or --space x=a|b"


@dataclass(frozen=True)
class Dimension:
    """One searched setting: a range (``low``, ``high``, ``log``, ``whole``) or a list
    of ``values``."""

    key: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    whole: bool = False
    values: tuple[Any, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """How a tune record writes the dimension."""
        if self.values:
            return {"key": self.key, "values": list(self.values)}
        return {
            "key": self.key,
            "low": self.low,
            "high": self.high,
            "log": self.log,
            "whole": self.whole,
        }

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is a point of this dimension."""
        if self.values:
            return any(same(value, v) for v in self.values)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        assert self.low is not None and self.high is not None
        return self.low <= value <= self.high and (not self.whole or float(value).is_integer())


def is_finite_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def same(a: Any, b: Any) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def card_space(card: Card) -> dict[str, Dimension]:
    """The card's ``search:`` block, checked (empty when the card has none)."""
    block = card.raw.get("search")
    if block is None:
        return {}
    if not isinstance(block, dict) or not block:
        raise UserError(
            f"{card.path}: `search:` must map settings to a range or a list of values, "
            "e.g. `search: {lr: {low: 0.0001, high: 0.1, log: true}, optimizer: [sgd, adam]}`."
        )
    return {
        str(key): dimension(card, str(key), spec, f"{card.path}: search: {key}")
        for key, spec in block.items()
    }


def parse_space_item(card: Card, text: str) -> Dimension:
    """One ``--space key=low..high[:log]`` or ``key=a|b|c`` item (the method's name
    already taken off the key)."""
    key, eq, spec = text.partition("=")
    where = f'--space "{card.name}.{text}"'
    if not eq or not key.strip() or not spec.strip():
        raise UserError(
            f"{where} is not of the form method.key=range or values, e.g. {SPACE_EXAMPLE}."
        )
    key, spec = key.strip(), spec.strip()
    if ".." in spec:
        bounds, _, scale = spec.partition(":")
        low, _, high = bounds.partition("..")
        if scale not in ("", "log"):
            raise UserError(f'{where}: ":{scale}" is not a scale; write ":log" or nothing.')
        return dimension(
            card,
            key,
            {"low": _number(where, low), "high": _number(where, high), "log": scale == "log"},
            where,
        )
    return dimension(card, key, [yaml.safe_load(v) for v in spec.split("|")], where)


def _number(where: str, text: str) -> float:
    try:
        value = yaml.safe_load(text.strip())
        return float(value) if not isinstance(value, bool) else math.nan
    except (yaml.YAMLError, TypeError, ValueError):
        raise UserError(
            f"{where}: {text.strip()!r} is not a number; e.g. {SPACE_EXAMPLE}."
        ) from None


def dimension(card: Card, key: str, spec: Any, where: str) -> Dimension:
    """One dimension of ``card``'s space from a card entry or a parsed ``--space`` item."""
    if key not in card.params:
        raise UserError(
            f'{where}: "{key}" is not a setting of {card.name}.{suggest(key, card.params)} '
            f"Its settings are: {', '.join(sorted(card.params))}."
        )
    default = card.params[key]
    if isinstance(spec, list):
        return _values(card, key, spec, where)
    if not isinstance(spec, dict) or set(spec) - {"low", "high", "log"} or "low" not in spec:
        raise UserError(
            f"{where} must be a range {{low: L, high: H, log: true|false}} or a list of values."
        )
    if isinstance(default, bool) or not isinstance(default, int | float):
        raise UserError(
            f"{where}: {card.name}.{key} is {default!r}, not a number, so it has no range; "
            "give its values as a list (key=a|b on the command line)."
        )
    low, high, log = spec["low"], spec.get("high"), spec.get("log", False)
    whole = isinstance(default, int)
    for name, value in (("low", low), ("high", high)):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise UserError(f"{where}: {name} {value!r} is not a finite number.")
        if whole and not float(value).is_integer():
            raise UserError(f"{where}: {card.name}.{key} is a whole number; {name} {value} is not.")
    if not isinstance(log, bool):
        raise UserError(f"{where}: log {log!r} must be true or false.")
    if not low < high:
        raise UserError(f"{where}: low {low} must be below high {high}.")
    if log and low <= 0:
        raise UserError(f"{where}: a log-scale range must start above 0, not at {low}.")
    for value in (low, high):
        _within_rules(card, key, int(value) if whole else float(value), where)
    return Dimension(key, float(low), float(high), log, whole)


def _values(card: Card, key: str, values: list, where: str) -> Dimension:
    if len(values) < 2:
        raise UserError(f"{where}: a list of values needs at least two; give one with --set.")
    if any(same(a, b) for i, a in enumerate(values) for b in values[:i]):
        raise UserError(f"{where}: a value is listed twice; list each once.")
    for value in values:
        _within_rules(card, key, value, where)
    return Dimension(key, values=tuple(values))


def _within_rules(card: Card, key: str, value: Any, where: str) -> None:
    """Refuse a value the card would refuse from ``--set``."""
    trial = Card(card.name, card.path, card.raw, dict(card.params), card.base_rules)
    try:
        trial.override(
            key, yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...")
        )
    except UserError as e:
        raise UserError(f"{where}: {value!r} is not a value {card.name}.{key} takes: {e}") from None


def set_item(card_name: str, key: str, value: Any) -> str:
    """The ``--set`` item that gives a setting a searched value."""
    return f"{card_name}.{key}={as_text(value)}"


def as_text(value: Any) -> str:
    """A value as ``--set`` writes it (YAML reads it back as the same value)."""
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...")
