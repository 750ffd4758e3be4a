"""A loaded card (:class:`Card`: its settings after ``--set`` and the rules they
keep) and how a setting's value is read, parsed and compared."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cl_bench.cards import sources
from cl_bench.errors import UserError, suggest


@dataclass
class Card:
    """A resolved card: ``params`` are the defaults after ``--set`` overrides."""

    name: str
    path: Path
    raw: dict
    params: dict = field(default_factory=dict)
    base_rules: dict = field(default_factory=dict)  # rules shared by every card of its kind
    origin: str = sources.BUILTIN  # where the card comes from (:mod:`cl_bench.cards.sources`)
    protocol: str = "fair"  # method cards: the named protocol (:mod:`cl_bench.cards.protocol`)
    scenario_sets: dict = field(default_factory=dict)  # ... and its per-run scenario settings
    explicit: set = field(default_factory=set)  # keys set by --set or the protocol: they win

    @property
    def title(self) -> str:
        return self.raw.get("title", self.name)

    def override(self, key: str, text: str) -> None:
        """Apply one ``--set`` value, checking the key, its type and its own rules;
        :meth:`check` then checks rules between settings (top_k <= pool_size)."""
        if key not in self.params:
            raise UserError(
                f'"{self.name}" has no setting "{key}".{suggest(key, self.params)} '
                f"Its settings are: {', '.join(sorted(self.params))} (see {self.path})."
            )
        self.params[key] = coerce(text, self.params[key], f"{self.name}.{key}")
        self.explicit.add(key)
        self.check(only=key)

    def rules(self) -> dict[str, dict]:
        """``bounds``, ``positive`` and ``choices``: the shared ones, then the card's."""
        own = {kind: self.raw.get(kind) or ({} if kind != "positive" else [])
               for kind in ("bounds", "positive", "choices")}
        return {"bounds": {**self.base_rules.get("bounds", {}), **own["bounds"]},
                "positive": [*self.base_rules.get("positive", []), *own["positive"]],
                "choices": {**self.base_rules.get("choices", {}), **own["choices"]}}

    def check(self, only: str | None = None, defaults: bool = False) -> None:
        """Refuse a setting that breaks its card's rules (``only``: rules of that
        setting and of the dotted keys below it). ``defaults``: the values are the
        card's own, so the error blames the card."""
        problems = [p for key, p in self.problems()
                    if only is None or key == only or key.startswith((f"{only}.", f"{only}["))]
        if not problems:
            return
        if defaults:
            raise UserError(f"{self.path}: the card's default {problems[0]}. Fix the card "
                            "(defaults must satisfy its bounds/positive/choices).")
        raise UserError(f"{problems[0]} (the rules are in {self.path}).")

    def problems(self) -> list[tuple[str, str]]:
        """(key, what is wrong) for every broken rule, in the order declared."""
        rules = self.rules()
        out = [(key, f"{self.name}.{key} = {value} is not a finite number; every number of "
                     "a setting must be finite, however YAML spells it (.inf, .nan, 1e999)")
               for key, value in non_finite(self.params)]
        for key, allowed in rules["choices"].items():
            found, value = lookup(self.params, key)
            if found and not any(a == value and isinstance(a, bool) == isinstance(value, bool)
                                 for a in allowed):
                out.append((key, f'{self.name}.{key} = "{value}" is not allowed; choose one '
                                 f"of {', '.join(map(str, allowed))}"))
        for key, (low, high) in rules["bounds"].items():
            found, value = lookup(self.params, key)
            if found and value is not None:
                limits = [(word, b, self.limit(b)) for word, b in
                          (("at least", low), ("at most", high)) if b is not None]
                if not is_number(value) or any(
                        (word == "at least" and value < v) or (word == "at most" and value > v)
                        for word, _, v in limits):
                    out.append((key, f"{self.name}.{key} = {value} is out of range: it must be "
                                + " and ".join(f"{word} {b}" + (f" ({v})" if b != v else "")
                                               for word, b, v in limits)))
        for key in rules["positive"]:
            found, value = lookup(self.params, key)
            if found and value is not None and not (is_number(value) and value > 0):
                out.append((key, f"{self.name}.{key} = {value} is out of range: it must be "
                                 "greater than 0"))
        return out

    def limit(self, bound: Any) -> Any:
        """A bound as a number: itself, or the value of the setting it names."""
        return bound if is_number(bound) else lookup(self.params, bound)[1]


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def non_finite(value: Any, key: str = "") -> list[tuple[str, float]]:
    """(dotted key, value) of every infinite or NaN float in a setting, however deep in
    its mappings and lists (YAML reads ``.inf`` and ``.nan`` as floats, which pass every
    bound: ``nan < 0`` and ``nan > 1`` are both false)."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(key, value)]
    if isinstance(value, dict):
        return [hit for k, v in value.items()
                for hit in non_finite(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, list):
        return [hit for i, v in enumerate(value) for hit in non_finite(v, f"{key}[{i}]")]
    return []


def lookup(params: dict, key: str) -> tuple[bool, Any]:
    """(present, value) of a setting; ``a.b`` is key ``b`` of the mapping setting ``a``."""
    node: Any = params
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def scientific(text: str) -> float | str:
    """``text`` as a float when it is a number (``1e-4``, ``5E3``, ``1e999``), else
    unchanged. Python also reads ``inf`` and ``nan`` as floats: those stay text (a
    word, not a number), while an overflowing number becomes inf, which the card's
    rules then refuse as not finite."""
    if text.strip().lstrip("+-").lower() in ("inf", "infinity", "nan"):
        return text
    try:
        return float(text)
    except ValueError:
        return text


def coerce(text: str, default: Any, label: str) -> Any:
    """Parse ``text`` as YAML and check it against the default's type."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    if default is None:
        return value
    if isinstance(default, float) and isinstance(value, str):
        value = scientific(value)  # YAML 1.1 reads 1e-4 (no dot) as a string
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(default, float) and isinstance(value, (int, float)) and not isinstance(
            value, bool):
        return float(value)
    elif isinstance(default, int) and isinstance(value, int) and not isinstance(value, bool):
        return value
    elif isinstance(default, str) and value is not None:  # null is no value, not "None"
        return str(value)
    elif isinstance(default, list) and isinstance(value, list):
        return value
    elif isinstance(default, dict) and isinstance(value, dict):
        return {**default, **value}  # --set scenario.dataset_args={n_classes: 3} merges
    raise UserError(f'--set {label}={text}: expected a {type(default).__name__} '
                    f"like the default ({default!r}), got {text!r}.")


def same_type(value: Any, default: Any) -> bool:
    """``value`` may stand where the card's default stands (an int for a float)."""
    if default is None or isinstance(default, bool) or isinstance(value, bool):
        return default is None or type(value) is type(default)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))
