"""Method cards, scenario cards and ``--set`` overrides.

A card is a YAML file: ``methods/<name>.yaml`` (defaults from the paper, the
strategy class, citation, published numbers) or ``benchmarks/<name>.yaml``
(dataset, class order, task split). Beside the built-in cards, installed packages
and folders add their own (:mod:`cl_bench.cards.sources`); :func:`card_index` says which
card a name means and where it comes from. ``--set owner.key=value`` overrides one
default, where ``owner`` is a method name or ``scenario``; values are parsed
as YAML and must keep the default's type.

Every numeric setting is bounded, and a card's own defaults are checked when
it is loaded, so that a setting out of range is refused before anything runs
instead of training something else (``epochs: -1`` trains nothing). Every number
of a setting is finite, however YAML spells it (``.inf`` and ``.nan`` are floats
that pass any bound). A setting that scales time has an upper bound (``epochs``);
one that scales memory is checked, with the others, by the memory estimate before
a run (:mod:`cl_bench.engine.memory`). A card declares, beside ``defaults``:

    bounds:      # [lowest, highest], both allowed; null: unbounded; a setting's
      epochs: [1, null]           # name: that setting's value (top_k <= pool_size)
      top_k: [1, pool_size]
      dataset_args.size: [4, null]  # a dotted key reaches into a mapping setting
    positive: [lr]   # must be greater than 0 (an exclusive lower bound)
    choices:         # the allowed values (booleans included)
      selection: [sample, batch]

Scenario cards share one schema, read by :mod:`cl_bench.scenarios`; its rules
(:data:`SCENARIO_RULES`) apply to every scenario card, under the card's own.
"""

from __future__ import annotations

import copy
import importlib
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cl_bench.cards import sources
from cl_bench.cards.foreign import MissingModule, contained, import_module
from cl_bench.cards.protocol import paper_settings, scenario_backbone
from cl_bench.contract import spec_of
from cl_bench.errors import UserError, suggest, unknown

ROOT = Path(__file__).resolve().parents[2]  # cl_bench/cards/config.py -> the checkout
_PACKAGED = sources.packaged()
CHECKOUT: Path | None = None if _PACKAGED else ROOT  # git provenance; writable baselines
METHODS_DIR = (_PACKAGED or ROOT) / "methods"
BENCHMARKS_DIR = (_PACKAGED or ROOT) / "benchmarks"
BASELINES_DIR = _PACKAGED / "baselines" if _PACKAGED else ROOT / "results" / "baselines"
KIND_KEYS = {"strategy": "method", "dataset": "scenario", "runs": "suite"}

METHOD_KEYS = ("strategy", "defaults")
SCENARIO_KEYS = ("dataset", "init_cls", "increment", "test_shuffle")
SCENARIO_RULES: dict = {
    "bounds": {"init_cls": [1, None], "increment": [1, None],
               "dataset_args.n_classes": [1, None],
               "expected.train_images": [1, None], "expected.test_images": [1, None]},
    "choices": {"test_shuffle": [True, False], "normalize": ["none", "backbone"]},
}


def read_yaml(path: Path) -> dict:
    """Parse a YAML mapping, turning syntax errors into a one-paragraph error."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                        f"{e.start}). Save the card as UTF-8 and run again.") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserError(f"{path} is not valid YAML{where}: {problem}. Fix the file "
                        "(for example with a YAML linter) and run again.") from None
    except OSError as e:
        raise UserError(f"Cannot read {path}: {e.strerror}.") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a YAML mapping (key: value lines), not "
                        f"{type(data).__name__}.")
    return data


@dataclass(frozen=True)
class Found:
    """Where a card is: its file and the source that brought it (see :mod:`sources`)."""

    path: Path
    origin: str


def card_index() -> dict[str, dict[str, Found]]:
    """kind (method, scenario, suite) -> name -> card, over the built-in cards and every
    other source; a name that two sources define is refused (result files are keyed
    by name, so the two cards would share runs)."""
    index: dict[str, dict[str, Found]] = {kind: {} for kind in KIND_KEYS.values()}
    seen: set[Path] = set()
    for source in [sources.Source(METHODS_DIR, sources.BUILTIN, "methods"),
                   sources.Source(BENCHMARKS_DIR, sources.BUILTIN, "benchmarks"),
                   *sources.extra_sources()]:
        if source.folder.resolve() in seen:  # e.g. --cards methods/ in a checkout
            continue
        seen.add(source.folder.resolve())
        for path in sorted(source.folder.glob("*.yaml")):
            kind = None if path.stem.startswith("_") else card_kind(path, source.kind)
            if kind is None:
                continue
            other = index[kind].get(path.stem)
            if other is not None:
                raise UserError(
                    f'Two {kind} cards are named "{path.stem}": {other.path} ({other.origin}) '
                    f"and {path} ({source.origin}). Results are kept by {kind} name, so a name "
                    "must mean one card: rename one of the files (a card's name is its file "
                    "name) or drop its folder from --cards / CL_BENCH_CARDS.")
            index[kind][path.stem] = Found(path, source.origin)
    return index


def card_kind(path: Path, folder_kind: str | None) -> str | None:
    """What a card file is: by its folder (built-in ``methods/``, ``benchmarks/``,
    where files that are neither scenario nor suite are ignored), else by its keys."""
    if folder_kind == "methods":
        return "method"
    raw = read_yaml(path)
    if folder_kind == "benchmarks":
        return "scenario" if "dataset" in raw else "suite" if "runs" in raw else None
    kinds = [k for key, k in KIND_KEYS.items() if key in raw]
    if len(kinds) > 1:
        raise UserError(f"{path} is two kinds of card at once: it has "
                        f"{' and '.join(f'`{key}:`' for key in KIND_KEYS if key in raw)}. A "
                        "card is a method (`strategy:`), a scenario (`dataset:`) or a suite "
                        "(`runs:`): split it into one file per kind.")
    kind = kinds[0] if kinds else None
    if kind is None:
        raise UserError(f"{path} is not a card: a method card has `strategy:`, a scenario "
                        "card `dataset:`, a suite `runs:`. Fix the file or move it out of "
                        "the cards folder.")
    return kind


def method_names() -> list[str]:
    return sorted(card_index()["method"])


def scenario_names() -> list[str]:
    """Scenario cards (suites such as ci.yaml live beside them but have no dataset)."""
    return sorted(card_index()["scenario"])


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


def check_rules(card: Card, required: bool) -> None:
    """The card's rules are well formed and name its settings (``required``: every
    rule of the card itself must name a setting it has; the shared scenario rules
    apply only where a card has the setting)."""
    own = {kind: card.raw.get(kind) for kind in ("bounds", "positive", "choices")}
    shapes = {"bounds": dict, "positive": list, "choices": dict}
    for kind, value in own.items():
        if value is not None and not isinstance(value, shapes[kind]):
            raise UserError(f"{card.path}: `{kind}:` must be a "
                            f"{'mapping' if shapes[kind] is dict else 'list'}, not "
                            f"{type(value).__name__}.")
    for key, pair in (own["bounds"] or {}).items():
        if not (isinstance(pair, list) and len(pair) == 2 and all(
                b is None or is_number(b) or is_number(lookup(card.params, str(b))[1])
                for b in pair)):
            raise UserError(f"{card.path}: bounds of {key} must be [lowest, highest], each a "
                            f"number, null or the name of a numeric setting; got {pair!r}.")
    for key, allowed in (own["choices"] or {}).items():
        if not isinstance(allowed, list):
            raise UserError(f"{card.path}: choices of {key} must be a list, not {allowed!r}.")
    named = [*(own["bounds"] or {}), *(own["positive"] or []), *(own["choices"] or {})]
    missing = [k for k in named if required and not lookup(card.params, str(k))[0]]
    if missing:
        raise UserError(f"{card.path}: its rules name {', '.join(map(str, missing))}, which "
                        f"is not a setting of the card ({', '.join(sorted(card.params))}).")


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


def load_method(name: str) -> Card:
    """A method card, checked whole: keys, strategy class, rules and defaults."""
    found = card_index()["method"].get(name)
    if found is None:
        raise UserError(f"{unknown('method', name, method_names())}{sources.broken_note()}")
    path, raw = found.path, read_yaml(found.path)
    need_keys(path, raw, METHOD_KEYS, "method")
    if not isinstance(raw["defaults"], dict):
        raise UserError(f"{path}: `defaults:` must be a mapping of setting: value, not "
                        f"{type(raw['defaults']).__name__}.")
    card = Card(name, path, raw, copy.deepcopy(raw["defaults"]), origin=found.origin)
    make_importable(card)
    from cl_bench.cards.needs import check_needed
    check_needed(card, strategy_of(card))
    if "contract" in raw:  # the settings cl-bench builds a plain Avalanche strategy from
        from cl_bench.strategies.plain import PLAIN_RULES
        card.base_rules = PLAIN_RULES
    check_rules(card, required=True)
    card.check(defaults=True)
    paper_settings(card)
    from cl_bench.cards.resolve import check_defaults_when
    check_defaults_when(card)
    return card


def load_scenario(name: str) -> Card:
    """A scenario card, checked whole: keys, rules and values."""
    found = card_index()["scenario"].get(name)
    if found is None:
        raise UserError(f"{unknown('scenario', name, scenario_names())}{sources.broken_note()}")
    path, raw = found.path, read_yaml(found.path)
    need_keys(path, raw, SCENARIO_KEYS, "scenario")
    params = {k: v for k, v in raw.items() if k not in (
        "name", "title", "description", "bounds", "positive", "choices", "backbone")}
    card = Card(name, path, raw, copy.deepcopy(params), SCENARIO_RULES, found.origin)
    check_rules(card, required=True)
    card.check(defaults=True)
    scenario_backbone(card)
    return card


def need_keys(path: Path, raw: dict, keys: tuple[str, ...], kind: str) -> None:
    missing = [k for k in keys if k not in raw]
    if missing:
        raise UserError(f"{path} lacks {', '.join(f'`{k}:`' for k in missing)}, which every "
                        f"{kind} card needs ({', '.join(keys)}).")


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
    block (:mod:`cl_bench.strategies.plain`)."""
    return strategy_class(card.path, card.raw["strategy"], card.raw.get("contract"),
                          card.raw["defaults"])


def strategy_class(path: Path, spec: Any, contract: Any = None,
                   defaults: dict | None = None) -> type:
    """The class a card's ``strategy: package.module:Class`` names (with its card's
    ``contract:`` block and ``defaults``, when it has one), or the card's error."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise UserError(f"{path}: `strategy:` must be \"package.module:Class\", not {spec!r}.")
    module, attr = spec.split(":")
    fix = "Fix the module or the card's `strategy:`; the other cards are not affected."
    try:
        with contained(f"{path}: importing strategy {spec}", fix):
            found = import_module(module)
    except MissingModule as e:
        raise UserError(f"{path}: strategy {spec} cannot be imported: no module named "
                        f"{e.name!r}. Fix `strategy:` in the card (a module is found among "
                        "the installed packages, or beside a card from outside the package: "
                        f"{path.parent / e.name.split('.')[0]}.py).") from None
    with contained(f"{path}: reading {attr} of strategy module {module}", fix):
        obj = getattr(found, attr, None)
    if obj is None:
        raise UserError(f"{path}: strategy {spec}: module {module} has no {attr!r}. Fix "
                        "`strategy:` in the card.")
    if not isinstance(obj, type):
        raise UserError(f"{path}: strategy {spec} is a {type(obj).__name__}, not a class. "
                        "Name the strategy class in `strategy:`.")
    if contract is not None:  # imported here: Avalanche's training stack, only when needed
        from cl_bench.strategies.plain import driven_class
        with contained(f"{path}: importing the `contract:` model factory", fix):
            return driven_class(obj, contract, defaults or {}, path, import_object)
    spec_of(obj, card=path)  # refuses a class that declares no method contract
    return obj


def parse_sets(items: list[str], owners: list[str]) -> list[tuple[str, str, str]]:
    """``["tosca.lr=0.01"]`` -> ``[("tosca", "lr", "0.01")]``, owners checked."""
    out = []
    for item in items:
        head, eq, value = item.partition("=")
        owner, dot, key = head.partition(".")
        if not eq or not dot or not key:
            raise UserError(f'--set "{item}" is not of the form owner.key=value '
                            "(for example --set tosca.lr=0.01 or --set scenario.increment=5).")
        if owner not in owners:
            running = ", ".join(o for o in owners if o != "scenario")
            raise UserError(f'--set "{item}": "{owner}" is neither "scenario" nor one of the '
                            f"methods being run ({running}).{suggest(owner, owners)}")
        out.append((owner, key, value))
    return out


def import_object(spec: str) -> Any:
    """``"package.module:Name"`` -> the object."""
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)
