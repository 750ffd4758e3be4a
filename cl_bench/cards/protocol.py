"""What a run starts from before ``--set``: its scenario's backbone and a named protocol.

Scenario default backbone. A scenario card may name the backbone its published
numbers were measured with::

    backbone:                      # --backbone / --weights override it
      name: vit_base_patch16_224
      weights: vit_base_patch16_224.augreg_in21k   # the pinned tag, "random" or a file

A card without one runs on :data:`cl_bench.backbones.DEFAULT_BACKBONE`.

Protocols. ``fair`` (the default) runs every method with its card's defaults:
per-image choices and shuffled test batches, nothing that leaks task identity.
``paper`` sets, for each method, the settings of its card's ``paper:`` block, the
protocol its published numbers were measured under::

    paper:
      selection: {value: batch, source: "official code: ..."}
      scenario.test_shuffle: {value: false, source: "..."}

A key is a setting of the card's ``defaults`` or ``scenario.<key>`` for one of
:data:`RUN_SCENARIO_KEYS`, the scenario settings that one run reads on its own
(the data and backbone are shared by every method of a command, so a method
cannot change them). Each value must pass the card's rules; the block is checked
when the card is loaded. ``--set`` is applied after the preset and wins over it.

A run records the protocol by name (``record["protocol"]["name"]``). A ``paper``
run's config also holds ``"protocol": "paper"``, so a paper run and a fair run never
share a result file, even for a method whose paper settings are its defaults; a
fair run's config has no such key, so its file name is the one it had before
protocols were named.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cl_bench.cards.card import Card, lookup, same_type
from cl_bench.cards.rules import SCENARIO_RULES
from cl_bench.errors import UserError, suggest, unknown

PROTOCOLS = ("fair", "paper")
DEFAULT_PROTOCOL = "fair"
RUN_SCENARIO_KEYS = ("test_shuffle",)
SCENARIO_PREFIX = "scenario."
WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".npz")


@dataclass(frozen=True)
class PaperSetting:
    """One entry of a card's ``paper:`` block."""

    key: str  # a setting of the card, or scenario.<key>
    value: Any
    source: str

    @property
    def scenario_key(self) -> str | None:
        return (
            self.key.removeprefix(SCENARIO_PREFIX) if self.key.startswith(SCENARIO_PREFIX) else None
        )


def check_protocol(name: str) -> str:
    if name not in PROTOCOLS:
        raise unknown("protocol", name, PROTOCOLS)
    return name


def paper_settings(card: Card) -> list[PaperSetting]:
    """The card's ``paper:`` block, checked: every key a setting of the card (or a
    per-run scenario setting), every value of the default's type and within the
    card's rules, every source named. A card without the block has no paper settings."""
    block = card.raw.get("paper")
    if block is None:
        return []
    fix = 'Fix the card\'s paper: block (paper: {setting: {value: V, source: "where"}}).'
    if not isinstance(block, dict):
        raise UserError(
            f"{card.path}: `paper:` must be a mapping of setting: {{value, "
            f"source}}, not {type(block).__name__}. {fix}"
        )
    out = []
    for key, entry in block.items():
        where = f"{card.path}: paper setting {key}"
        if not (
            isinstance(entry, dict)
            and set(entry) == {"value", "source"}
            and isinstance(entry["source"], str)
            and entry["source"].strip()
        ):
            raise UserError(
                f'{where} must be {{value: V, source: "where it comes from"}}, not {entry!r}. {fix}'
            )
        setting = PaperSetting(str(key), entry["value"], entry["source"])
        problem = (
            _scenario_problem(setting)
            if setting.scenario_key is not None
            else _method_problem(card, setting)
        )
        if problem:
            raise UserError(f"{where}: {problem}. {fix}")
        out.append(setting)
    return out


def _method_problem(card: Card, setting: PaperSetting) -> str | None:
    found, default = lookup(card.params, setting.key)
    if not found or "." in setting.key:
        return (
            f'{card.name} has no setting "{setting.key}".{suggest(setting.key, card.params)}'
            f" Its settings are: {', '.join(sorted(card.params))}; a scenario setting is "
            f"written {SCENARIO_PREFIX}<key> ({', '.join(RUN_SCENARIO_KEYS)})"
        )
    if not same_type(setting.value, default):
        return f"{setting.value!r} is not a {type(default).__name__} like the default ({default!r})"
    trial = copy.deepcopy(card)
    trial.params[setting.key] = setting.value
    problems = [p for key, p in trial.problems() if key == setting.key]
    return problems[0] if problems else None


def _scenario_problem(setting: PaperSetting) -> str | None:
    key = setting.scenario_key
    if key not in RUN_SCENARIO_KEYS:
        return (
            f'scenario setting "{key}" cannot be set per method (only '
            f"{', '.join(RUN_SCENARIO_KEYS)}: the data and backbone are shared by every "
            "method of a command)"
        )
    allowed = SCENARIO_RULES["choices"][key]
    if not any(a == setting.value and type(a) is type(setting.value) for a in allowed):
        return f"{setting.value!r} is not allowed; choose one of {', '.join(map(str, allowed))}"
    return None


def apply_protocol(name: str, methods: list[Card]) -> None:
    """Set each method card to protocol ``name`` (before ``--set``): the card records
    the name, and under ``paper`` takes its paper settings (scenario ones are kept on
    the card and applied to its runs' scenario by :func:`run_scenario`)."""
    check_protocol(name)
    for card in methods:
        card.protocol = name
        if name != "paper":
            continue
        for setting in paper_settings(card):
            if setting.scenario_key is not None:
                card.scenario_sets[setting.scenario_key] = setting.value
            else:
                card.params[setting.key] = copy.deepcopy(setting.value)
                card.explicit.add(setting.key)


def run_scenario(card: Card, scenario: Card) -> Card:
    """The scenario as ``card``'s runs see it: with the card's per-run scenario
    settings (a ``--set scenario.<key>`` has already removed the ones it overrides)."""
    if not card.scenario_sets:
        return scenario
    mine = copy.deepcopy(scenario)
    mine.params.update(copy.deepcopy(card.scenario_sets))
    return mine


def changed_settings(card: Card, scenario: Card) -> list[tuple[str, Any]]:
    """(key, value) of every resolved setting of a run that differs from the cards'
    own values: the method's, then the scenario's as ``scenario.<key>``."""
    method = [(k, v) for k, v in card.params.items() if card.raw["defaults"].get(k) != v]
    return method + [
        (SCENARIO_PREFIX + k, v) for k, v in scenario.params.items() if scenario.raw.get(k) != v
    ]


def config_tag(card: Card) -> dict:
    """What the protocol adds to a run's hashed config: nothing for ``fair``; and, for
    settings a search chose (``run --tuned``), where they came from."""
    tag = {} if card.protocol == DEFAULT_PROTOCOL else {"protocol": card.protocol}
    return tag if card.tuned is None else {**tag, "tuned": card.tuned}


def scenario_backbone(scenario: Card) -> tuple[str | None, str | None]:
    """The card's default (backbone, weights), checked; (None, None) when it names
    none. ``weights`` None means the backbone's pinned pretrained weights."""
    from cl_bench.backbones import BACKBONES
    from cl_bench.backbones.vit import PINNED_TAGS

    spec = scenario.raw.get("backbone")
    if spec is None:
        return None, None
    if not (
        isinstance(spec, dict)
        and isinstance(spec.get("name"), str)
        and set(spec) <= {"name", "weights"}
    ):
        raise UserError(
            f"{scenario.path}: `backbone:` must be {{name: <backbone>, weights: "
            f"<pinned tag | random | file>}}, not {spec!r}."
        )
    name, weights = spec["name"], spec.get("weights")
    if name not in BACKBONES:
        raise UserError(
            f"{scenario.path}: backbone {name!r} is not a known backbone."
            f"{suggest(name, BACKBONES)} Known: {', '.join(BACKBONES)}."
        )
    pinned = PINNED_TAGS.get(name)
    if weights is None or weights == pinned:
        return name, None
    if weights == "random" or (
        isinstance(weights, str) and Path(weights).suffix in WEIGHT_SUFFIXES
    ):
        return name, weights
    raise UserError(
        f"{scenario.path}: backbone weights {weights!r} are neither {name}'s "
        f"pinned tag ({pinned or 'its packaged weights: omit weights'}), "
        f'"random", nor a weights file ({", ".join(WEIGHT_SUFFIXES)}).'
    )
