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
(:data:`cl_bench.cards.rules.SCENARIO_RULES`) apply to every scenario card, under the
card's own.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from cl_bench.cards import sources
from cl_bench.cards.card import RULE_KINDS, VALUE_TYPES, Card, is_number, lookup, type_names
from cl_bench.cards.declared import check_declared
from cl_bench.cards.needs import check_needed
from cl_bench.cards.places import BENCHMARKS_DIR, METHODS_DIR, read_yaml
from cl_bench.cards.protocol import paper_settings, scenario_backbone
from cl_bench.cards.resolve import check_defaults_when
from cl_bench.cards.rules import METHOD_KEYS, SCENARIO_KEYS, SCENARIO_RULES
from cl_bench.cards.search import card_space
from cl_bench.cards.strategy import make_importable, strategy_of
from cl_bench.errors import UserError, suggest, unknown

KIND_KEYS = {"strategy": "method", "dataset": "scenario", "runs": "suite"}


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
    for source in [
        sources.Source(METHODS_DIR, sources.BUILTIN, "methods"),
        sources.Source(BENCHMARKS_DIR, sources.BUILTIN, "benchmarks"),
        *sources.extra_sources(),
    ]:
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
                    "name) or drop its folder from --cards / CL_BENCH_CARDS."
                )
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
        raise UserError(
            f"{path} is two kinds of card at once: it has "
            f"{' and '.join(f'`{key}:`' for key in KIND_KEYS if key in raw)}. A "
            "card is a method (`strategy:`), a scenario (`dataset:`) or a suite "
            "(`runs:`): split it into one file per kind."
        )
    kind = kinds[0] if kinds else None
    if kind is None:
        raise UserError(
            f"{path} is not a card: a method card has `strategy:`, a scenario "
            "card `dataset:`, a suite `runs:`. Fix the file or move it out of "
            "the cards folder."
        )
    return kind


def method_names() -> list[str]:
    return sorted(card_index()["method"])


def scenario_names() -> list[str]:
    """Scenario cards (suites such as ci.yaml live beside them but have no dataset)."""
    return sorted(card_index()["scenario"])


def check_rules(card: Card, required: bool) -> None:
    """The card's rules are well formed and name its settings (``required``: every
    rule of the card itself must name a setting it has; the shared scenario rules
    apply only where a card has the setting)."""
    own = {kind: card.raw.get(kind) for kind in RULE_KINDS}
    shapes = {"bounds": dict, "positive": list, "choices": dict, "types": dict}
    for kind, value in own.items():
        if value is not None and not isinstance(value, shapes[kind]):
            raise UserError(
                f"{card.path}: `{kind}:` must be a "
                f"{'mapping' if shapes[kind] is dict else 'list'}, not "
                f"{type(value).__name__}."
            )
    for key, pair in (own["bounds"] or {}).items():
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and all(
                b is None or is_number(b) or is_number(lookup(card.params, str(b))[1]) for b in pair
            )
        ):
            raise UserError(
                f"{card.path}: bounds of {key} must be [lowest, highest], each a "
                f"number, null or the name of a numeric setting; got {pair!r}."
            )
    for key, allowed in (own["choices"] or {}).items():
        if not isinstance(allowed, list):
            raise UserError(f"{card.path}: choices of {key} must be a list, not {allowed!r}.")
    for key, kinds in (own["types"] or {}).items():
        if not (
            isinstance(kinds, list) and kinds and all(k in VALUE_TYPES for k in type_names(kinds))
        ):
            raise UserError(
                f"{card.path}: types of {key} must be a list of the kinds of value "
                f"it takes, each one of {', '.join(VALUE_TYPES)}; got {kinds!r}."
            )
    named = [
        *(own["bounds"] or {}),
        *(own["positive"] or []),
        *(own["choices"] or {}),
        *(own["types"] or {}),
    ]
    missing = [k for k in named if required and not lookup(card.params, str(k))[0]]
    if missing:
        raise UserError(
            f"{card.path}: its rules name {', '.join(map(str, missing))}, which "
            f"is not a setting of the card ({', '.join(sorted(card.params))})."
        )


def load_method(name: str) -> Card:
    """A method card, checked whole: keys, strategy class, rules and defaults."""
    found = card_index()["method"].get(name)
    if found is None:
        raise UserError(f"{unknown('method', name, method_names())}{sources.broken_note()}")
    path, raw = found.path, read_yaml(found.path)
    need_keys(path, raw, METHOD_KEYS, "method")
    if not isinstance(raw["defaults"], dict):
        raise UserError(
            f"{path}: `defaults:` must be a mapping of setting: value, not "
            f"{type(raw['defaults']).__name__}."
        )
    check_upper_bound(path, raw)
    card = Card(name, path, raw, copy.deepcopy(raw["defaults"]), origin=found.origin)
    make_importable(card)
    cls = strategy_of(card)
    check_needed(card, cls, METHODS_DIR)
    check_declared(path, raw, cls)
    if "contract" in raw:  # the settings cl-bench builds a plain Avalanche strategy from
        from cl_bench.contract.plain import PLAIN_RULES

        card.base_rules = PLAIN_RULES
    check_rules(card, required=True)
    card.check(defaults=True)
    paper_settings(card)
    check_defaults_when(card)
    card_space(card)
    return card


def check_upper_bound(path: Path, raw: dict) -> bool:
    """A method card's ``upper_bound:`` (absent: false): true marks a reference that
    sees what continual learning withholds (Joint trains on every task at once), which
    a report shows apart and never marks as the best."""
    value = raw.get("upper_bound", False)
    if not isinstance(value, bool):
        raise UserError(
            f"{path}: `upper_bound: {value}` must be true or false: true for a method "
            "that sees every task at once (an upper bound, as Joint), else leave it out."
        )
    return value


def is_upper_bound(name: str) -> bool:
    """Whether the method card ``name`` says ``upper_bound: true``; read without importing
    its strategy (false for a name no card has)."""
    found = card_index()["method"].get(name)
    return found is not None and check_upper_bound(found.path, read_yaml(found.path))


def load_scenario(name: str) -> Card:
    """A scenario card, checked whole: keys, rules and values."""
    found = card_index()["scenario"].get(name)
    if found is None:
        raise UserError(f"{unknown('scenario', name, scenario_names())}{sources.broken_note()}")
    path, raw = found.path, read_yaml(found.path)
    need_keys(path, raw, SCENARIO_KEYS, "scenario")
    params = {
        k: v
        for k, v in raw.items()
        if k not in ("name", "title", "description", *RULE_KINDS, "backbone")
    }
    card = Card(name, path, raw, copy.deepcopy(params), SCENARIO_RULES, found.origin)
    check_rules(card, required=True)
    card.check(defaults=True)
    scenario_backbone(card)
    return card


def need_keys(path: Path, raw: dict, keys: tuple[str, ...], kind: str) -> None:
    missing = [k for k in keys if k not in raw]
    if missing:
        raise UserError(
            f"{path} lacks {', '.join(f'`{k}:`' for k in missing)}, which every "
            f"{kind} card needs ({', '.join(keys)})."
        )


def parse_sets(items: list[str], owners: list[str]) -> list[tuple[str, str, str]]:
    """``["tosca.lr=0.01"]`` -> ``[("tosca", "lr", "0.01")]``, owners checked."""
    out = []
    for item in items:
        head, eq, value = item.partition("=")
        owner, dot, key = head.partition(".")
        if not eq or not dot or not key:
            raise UserError(
                f'--set "{item}" is not of the form owner.key=value '
                "(for example --set tosca.lr=0.01 or --set scenario.increment=5)."
            )
        if owner not in owners:
            running = ", ".join(o for o in owners if o != "scenario")
            raise UserError(
                f'--set "{item}": "{owner}" is neither "scenario" nor one of the '
                f"methods being run ({running}).{suggest(owner, owners)}"
            )
        out.append((owner, key, value))
    return out


def resolve_backbone(
    scenario: str, backbone: str | None, weights: str | None
) -> tuple[str, str | None]:
    """(backbone, weights) of a run on ``scenario``: ``--backbone`` when given, else the
    scenario card's default (its weights unless ``--weights`` is given), else the
    package default."""
    from cl_bench.backbones import DEFAULT_BACKBONE

    if backbone is not None:
        return backbone, weights
    name, card_weights = scenario_backbone(load_scenario(scenario))
    if name is None:
        return DEFAULT_BACKBONE, weights
    return name, weights if weights is not None else card_weights
