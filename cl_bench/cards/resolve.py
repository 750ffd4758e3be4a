"""A method card's settings once the backbone is known: ``auto`` values, and the
defaults that depend on them (a card's ``defaults_when:`` block).

Official code often keeps one settings file per variant of a method (PILOT's APER:
``aper_aperpter.json`` trains adapters for 20 epochs at batch 48, ``aper_finetune.json``
the whole backbone for 6 epochs at batch 128); a card has one ``defaults:``. Its
``defaults_when:`` names, per value of a setting, the defaults that differ:

    defaults_when:
      adapt:                        # the setting, after resolve_params (auto -> finetune)
        finetune: {epochs: 6, batch_size: 128, weight_decay: 0.05}

:func:`resolve_for_backbone` is the one place every command (run, dry run, account)
goes through: the strategy replaces its ``auto`` values (``resolve_params``), then the
matching ``defaults_when`` values replace the defaults of the keys that neither
``--set`` nor the protocol named (an explicit value always wins), then the card's
rules and the strategy's backbone checks run on the result. The run's config, and so
its result path, records the values used.
"""

from __future__ import annotations

import copy
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from cl_bench.cards import sources
from cl_bench.cards.card import Card, lookup, same_type
from cl_bench.cards.foreign import contained
from cl_bench.cards.strategy import strategy_of
from cl_bench.errors import UserError

KEY = "defaults_when"


def check_defaults_when(card: Card) -> None:
    """The block is well formed: settings the card has, values its choices allow, and
    defaults of the type of the card's own that satisfy its rules."""
    block = card.raw.get(KEY)
    if block is None:
        return
    where = f"{card.path}: `{KEY}:`"
    if not isinstance(block, dict):
        raise UserError(
            f"{where} must map a setting to {{value: {{setting: default}}}}, "
            f"not {type(block).__name__}."
        )
    choices = card.rules()["choices"]
    for setting, cases in block.items():
        if setting not in card.params:
            raise UserError(
                f'{where} names "{setting}", which is not a setting of the card '
                f"(its settings: {', '.join(sorted(card.params))})."
            )
        if not isinstance(cases, dict):
            raise UserError(
                f"{where} {setting} must map its values to defaults, e.g. "
                f"{setting}: {{value: {{epochs: 6}}}}."
            )
        for value, defaults in cases.items():
            if setting in choices and value not in choices[setting]:
                raise UserError(
                    f"{where} {setting}={value} is not one of its choices "
                    f"({', '.join(map(str, choices[setting]))})."
                )
            check_case(card, f"{where} {setting}={value}", defaults)
            if setting in defaults:
                raise UserError(
                    f"{where} {setting}={value} sets {setting} itself; a case "
                    "may only set other settings."
                )


def check_case(card: Card, where: str, defaults: Any) -> None:
    if not isinstance(defaults, dict) or not defaults:
        raise UserError(f"{where} must be a non-empty mapping of setting: default.")
    trial = copy.deepcopy(card)
    for key, value in defaults.items():
        found, default = lookup(card.params, str(key))
        if not found or "." in str(key):
            raise UserError(f'{where} sets "{key}", which is not a setting of the card.')
        if not same_type(value, default):
            raise UserError(
                f"{where} sets {key}={value!r}, not a {type(default).__name__} "
                f"like the default ({default!r})."
            )
        trial.params[key] = value
    problems = [p for key, p in trial.problems() if key in defaults]
    if problems:
        raise UserError(f"{where}: {problems[0]}. Fix the card.")


def dependent_defaults(card: Card) -> dict[str, tuple[Any, str]]:
    """key -> (default, why) of the ``defaults_when`` cases the card's current values
    match, for the keys nobody set explicitly."""
    out: dict[str, tuple[Any, str]] = {}
    for setting, cases in (card.raw.get(KEY) or {}).items():
        value = card.params.get(setting)
        case = next((d for v, d in cases.items() if v == value), {})  # value may be a list
        for key, default in case.items():
            if key not in card.explicit:
                out[key] = (default, f"{setting}={value}")
    return out


def resolve_for_backbone(card: Card, backbone) -> dict[str, str]:
    """Settle ``card``'s settings for ``backbone`` (see the module docstring); return
    the origin of each value this changed, by key (for the dry run's listing)."""
    cls = strategy_of(card)
    before = copy.deepcopy(card.params)
    with hook(card, "resolve_params"):
        cls.resolve_params(card.params, backbone)
    origins = {k: f"{backbone.kind} backbone" for k, v in card.params.items() if before.get(k) != v}
    for key, (default, why) in dependent_defaults(card).items():
        card.params[key] = copy.deepcopy(default)
        origins[key] = why
    card.check()
    with hook(card, "check_params"):
        cls.check_params(card.params, backbone)
    return origins


def hook(card: Card, name: str) -> AbstractContextManager:
    """A hook of a strategy from outside the package is foreign code (an exception is
    one paragraph naming the card); a built-in one raising is a bug: its traceback."""
    if card.origin == sources.BUILTIN:
        return nullcontext()
    return contained(
        f"{card.path}: the strategy's {name}",
        "Fix that method of the strategy (to refuse a setting, raise cl_bench.errors.UserError).",
    )
