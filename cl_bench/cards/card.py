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

RULE_KINDS = ("bounds", "positive", "choices", "types")
# ``types:`` names every kind of value a setting takes when that is more than its
# default's (``class_order: [text, list]``: "seed" or a list of class ids;
# ``importance_max: [number, null]``: null is no bound)
VALUE_TYPES = {
    "text": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "list": lambda v: isinstance(v, list),
    "mapping": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


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
    tuned: dict | None = None  # method cards: where tuned settings came from (cl_bench.tune)

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
        types = self.rules()["types"].get(key, ())
        # a setting of several kinds is parsed against the card's own default, so that a
        # second --set of it is read as the first was (not against null or a list)
        default = (
            self.params[key]
            if not types
            else self.raw.get("defaults", self.raw).get(key, self.params[key])
        )
        self.params[key] = coerce(text, default, f"{self.name}.{key}", types)
        self.explicit.add(key)
        self.check(only=key)

    def rules(self) -> dict[str, dict]:
        """``bounds``, ``positive``, ``choices`` and ``types``: the shared ones, then the
        card's."""
        own = {
            kind: self.raw.get(kind) or ({} if kind != "positive" else []) for kind in RULE_KINDS
        }
        return {
            "bounds": {**self.base_rules.get("bounds", {}), **own["bounds"]},
            "positive": [*self.base_rules.get("positive", []), *own["positive"]],
            "choices": {**self.base_rules.get("choices", {}), **own["choices"]},
            "types": {
                key: type_names(kinds)
                for key, kinds in {**self.base_rules.get("types", {}), **own["types"]}.items()
            },
        }

    def check(self, only: str | None = None, defaults: bool = False) -> None:
        """Refuse a setting that breaks its card's rules (``only``: rules of that
        setting and of the dotted keys below it). ``defaults``: the values are the
        card's own, so the error blames the card."""
        problems = [
            p
            for key, p in self.problems()
            if only is None or key == only or key.startswith((f"{only}.", f"{only}["))
        ]
        if not problems:
            return
        if defaults:
            raise UserError(
                f"{self.path}: the card's default {problems[0]}. Fix the card "
                "(defaults must satisfy its bounds/positive/choices)."
            )
        raise UserError(f"{problems[0]} (the rules are in {self.path}).")

    def problems(self) -> list[tuple[str, str]]:
        """(key, what is wrong) for every broken rule, in the order declared."""
        rules = self.rules()
        out = [
            (
                key,
                f"{self.name}.{key} = {value} is not a finite number; every number of "
                "a setting must be finite, however YAML spells it (.inf, .nan, 1e999)",
            )
            for key, value in non_finite(self.params)
        ]
        for key, allowed in rules["choices"].items():
            found, value = lookup(self.params, key)
            if found and not any(
                a == value and isinstance(a, bool) == isinstance(value, bool) for a in allowed
            ):
                out.append(
                    (
                        key,
                        f'{self.name}.{key} = "{value}" is not allowed; choose one '
                        f"of {', '.join(map(str, allowed))}",
                    )
                )
        for key, (low, high) in rules["bounds"].items():
            found, value = lookup(self.params, key)
            if found and value is not None:
                limits = [
                    (word, b, self.limit(b))
                    for word, b in (("at least", low), ("at most", high))
                    if b is not None
                ]
                if not is_number(value) or any(
                    (word == "at least" and value < v) or (word == "at most" and value > v)
                    for word, _, v in limits
                ):
                    out.append(
                        (
                            key,
                            f"{self.name}.{key} = {value} is out of range: it must be "
                            + " and ".join(
                                f"{word} {b}" + (f" ({v})" if b != v else "")
                                for word, b, v in limits
                            ),
                        )
                    )
        for key in rules["positive"]:
            found, value = lookup(self.params, key)
            if found and value is not None and not (is_number(value) and value > 0):
                out.append(
                    (key, f"{self.name}.{key} = {value} is out of range: it must be greater than 0")
                )
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
        return [
            hit for k, v in value.items() for hit in non_finite(v, f"{key}.{k}" if key else str(k))
        ]
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


def coerce(text: str, default: Any, label: str, types: list[str] | tuple = ()) -> Any:
    """Parse ``text`` as YAML and check it against the default's type. Where the card
    names more kinds of value for the setting (``types``, its ``types:`` entry, of
    :data:`VALUE_TYPES`), a value of another named kind than the present value's is
    taken as parsed (``[1, 0]`` for a class order of "seed", null for a bound)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    if default is None:
        return value
    own = _kind(default, types) if types else None
    if any(kind != own and VALUE_TYPES[kind](value) for kind in types):
        return value
    if isinstance(default, float) and isinstance(value, str):
        value = scientific(value)  # YAML 1.1 reads 1e-4 (no dot) as a string
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif (
        isinstance(default, float)
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
    ):
        return float(value)
    elif isinstance(default, int) and isinstance(value, int) and not isinstance(value, bool):
        return value
    elif isinstance(default, str) and value is not None:  # null is no value, not "None"
        return str(value)
    elif isinstance(default, list) and isinstance(value, list):
        return value
    elif isinstance(default, dict) and isinstance(value, dict):
        return {**default, **value}  # --set scenario.dataset_args={n_classes: 3} merges
    others = f" or another kind its card's `types:` names ({', '.join(types)})" if types else ""
    raise UserError(
        f"--set {label}={text}: expected a {type(default).__name__} "
        f"like the default ({default!r}){others}, got {text!r}."
    )


def type_names(kinds: list) -> list:
    """A ``types:`` entry with YAML's null (``[number, null]``) read as the kind "null"."""
    return ["null" if kind is None else kind for kind in kinds]


def _kind(default: Any, types: list[str] | tuple) -> str:
    """The kind in ``types`` that the setting's present value is."""
    return next((kind for kind in types if VALUE_TYPES[kind](default)), types[0])


def same_type(value: Any, default: Any) -> bool:
    """``value`` may stand where the card's default stands (an int for a float)."""
    if default is None or isinstance(default, bool) or isinstance(value, bool):
        return default is None or type(value) is type(default)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))
