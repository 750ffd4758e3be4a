"""The package versions a number was measured with, and which of them differ.

Every result records the version of each installed package of cl-bench's dependency
tree (``env.packages``); a baseline records the same (``provenance.packages``). When a
number moves, the first question is whether the code or the environment moved:
``cl-bench check`` and ``cl-bench report`` name the packages whose versions differ
between the sides they compare (EASE's users learnt the hard way that timm 0.6 and 1.0
give other numbers).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from importlib import metadata

ROOT_DISTRIBUTION = "cl-bench"
# the packages recorded by name since the first results, for records without `packages`
CORE = ("torch", "timm", "avalanche", "numpy")
ALIASES = {"avalanche-lib": "avalanche"}
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    name = re.sub(r"[-_.]+", "-", name).lower()
    return ALIASES.get(name, name)


@lru_cache(maxsize=1)
def dependency_versions() -> dict[str, str]:
    """``name -> version`` of every installed package cl-bench depends on, directly or
    not (extras' requirements left out). Empty when cl-bench is not installed as a
    distribution (a bare source tree on ``PYTHONPATH``)."""
    found: dict[str, str] = {}
    todo = [ROOT_DISTRIBUTION]
    while todo:
        name = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        key = canonical(name)
        if key in found:
            continue
        if name != ROOT_DISTRIBUTION:
            found[key] = dist.version
        for req in dist.requires or []:
            match = _NAME.match(req)
            marker = req.partition(";")[2]
            if match and "extra" not in marker:
                todo.append(match.group(1))
    return dict(sorted(found.items()))


def recorded(env: Mapping) -> dict[str, str]:
    """The package versions an ``env`` (of a record) or ``provenance`` (of a baseline)
    holds: its ``packages`` mapping, else the core packages it names one by one."""
    packages = env.get("packages")
    if isinstance(packages, Mapping):
        return {canonical(k): str(v) for k, v in packages.items()}
    # torch.__version__ carries the build ("+cu130"); the distribution's version does not
    return {name: str(env[name]).split("+")[0] for name in CORE if env.get(name) is not None}


def differing(sides: Iterable[Mapping[str, str]]) -> dict[str, list[str]]:
    """``name -> sorted distinct versions`` for each package that more than one version
    appears for, among the packages every side records (a package only one side knows
    about says nothing)."""
    sides = list(sides)
    if len(sides) < 2:
        return {}
    common = set.intersection(*(set(side) for side in sides))
    out = {}
    for name in sorted(common):
        values = sorted({side[name] for side in sides})
        if len(values) > 1:
            out[name] = values
    return out


def describe(diff: Mapping[str, list[str]]) -> str:
    """``timm 0.6.12 / 1.0.31, numpy 2.3.0 / 2.4.6``."""
    return ", ".join(f"{name} {' / '.join(values)}" for name, values in diff.items())
