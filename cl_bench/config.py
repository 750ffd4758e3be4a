"""Method cards, scenario cards and ``--set`` overrides.

A card is a YAML file: ``methods/<name>.yaml`` (defaults from the paper, the
strategy class, citation, published numbers) or ``benchmarks/<name>.yaml``
(dataset, class order, task split). ``--set owner.key=value`` overrides one
default, where ``owner`` is a method name or ``scenario``; values are parsed
as YAML and must keep the default's type.
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cl_bench.errors import UserError, suggest, unknown

ROOT = Path(__file__).resolve().parents[1]
METHODS_DIR = ROOT / "methods"
BENCHMARKS_DIR = ROOT / "benchmarks"


def read_yaml(path: Path) -> dict:
    """Parse a YAML mapping, turning syntax errors into a one-paragraph error."""
    try:
        data = yaml.safe_load(path.read_text())
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


def _names(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml") if not p.stem.startswith("_"))


def method_names() -> list[str]:
    return _names(METHODS_DIR)


def scenario_names() -> list[str]:
    """Scenario cards (suites such as ci.yaml live beside them but have no dataset)."""
    return [n for n in _names(BENCHMARKS_DIR)
            if "dataset" in read_yaml(BENCHMARKS_DIR / f"{n}.yaml")]


@dataclass
class Card:
    """A resolved card: ``params`` are the defaults after ``--set`` overrides."""

    name: str
    path: Path
    raw: dict
    params: dict = field(default_factory=dict)

    @property
    def title(self) -> str:
        return self.raw.get("title", self.name)

    def override(self, key: str, text: str) -> None:
        """Apply one ``--set`` value, checking the key, its type and allowed choices."""
        if key not in self.params:
            raise UserError(
                f'"{self.name}" has no setting "{key}".{suggest(key, self.params)} '
                f"Its settings are: {', '.join(sorted(self.params))} (see {self.path})."
            )
        value = coerce(text, self.params[key], f"{self.name}.{key}")
        choices = self.raw.get("choices", {}).get(key)
        if choices is not None and value not in choices:
            raise UserError(f'{self.name}.{key} = "{value}" is not allowed; choose one of '
                            f"{', '.join(map(str, choices))}.")
        low, high = self.raw.get("bounds", {}).get(key, (None, None))
        if (low is not None and value < low) or (high is not None and value > high):
            raise UserError(f"{self.name}.{key} = {value} is out of range: it must be "
                            + " and ".join(f"{word} {b}" for word, b in
                                           (("at least", low), ("at most", high))
                                           if b is not None) + ".")
        self.params[key] = value


def coerce(text: str, default: Any, label: str) -> Any:
    """Parse ``text`` as YAML and check it against the default's type."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    if default is None or value is None:
        return value
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(default, float) and isinstance(value, (int, float)) and not isinstance(
            value, bool):
        return float(value)
    elif isinstance(default, int) and isinstance(value, int) and not isinstance(value, bool):
        return value
    elif isinstance(default, str):
        return str(value)
    elif isinstance(default, list) and isinstance(value, list):
        return value
    elif isinstance(default, dict) and isinstance(value, dict):
        return {**default, **value}  # --set scenario.dataset_args={n_classes: 3} merges
    raise UserError(f'--set {label}={text}: expected a {type(default).__name__} '
                    f"like the default ({default!r}), got {text!r}.")


def load_method(name: str) -> Card:
    path = METHODS_DIR / f"{name}.yaml"
    if not path.exists():
        raise unknown("method", name, method_names())
    raw = read_yaml(path)
    for key in ("strategy", "defaults"):
        if key not in raw:
            raise UserError(f'{path} lacks the "{key}" entry every method card needs.')
    return Card(name, path, raw, copy.deepcopy(raw["defaults"]))


def load_scenario(name: str) -> Card:
    path = BENCHMARKS_DIR / f"{name}.yaml"
    if not path.exists() or name not in scenario_names():
        raise unknown("scenario", name, scenario_names())
    raw = read_yaml(path)
    params = {k: v for k, v in raw.items() if k not in ("name", "title", "description")}
    return Card(name, path, raw, copy.deepcopy(params))


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
