"""Sweeps in the Python API: ``settings={"tosca.lr": cl_bench.sweep([0.01, 0.05])}`` runs
one configuration per value, as ``--set tosca.lr=0.01,0.05`` does on the command line. A
plain Python list stays one value (a setting that takes a list, e.g.
``{"scenario.class_order": [1, 2, 3]}``); only :func:`sweep` sweeps."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from cl_bench.errors import UserError

__all__ = ["Sweep", "sweep", "sweep_text"]


@dataclass(frozen=True)
class Sweep:
    """The values a setting is swept over (make one with :func:`sweep`)."""

    values: tuple[object, ...]


def sweep(values: Iterable[object]) -> Sweep:
    """Mark ``values`` as a sweep: one configuration per value, each run with the
    identity a single value gives. ``cl_bench.sweep([0.01, 0.05])``."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise UserError(
            f"sweep({values!r}) takes the values as a list, e.g. cl_bench.sweep([0.01, 0.05])."
        )
    found = tuple(values)
    if len(found) < 2:
        raise UserError(
            f"sweep({list(found)!r}) needs at least two values; give one value without "
            "sweep(), e.g. settings={'tosca.lr': 0.01}."
        )
    return Sweep(found)


def sweep_text(key: str, swept: Sweep) -> str:
    """The ``--set`` value of a sweep: each value as :func:`cl_bench.api.settings_as_sets`
    writes one (a string as typed, other values as JSON, which YAML reads), joined by
    commas; a string with a comma of its own is quoted, so that it stays one value."""
    from cl_bench.cards.sweep import split_values

    texts = []
    for value in swept.values:
        try:
            text = value if isinstance(value, str) else json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise UserError(
                f"settings[{key!r}]: the swept value {value!r} is not a number, bool, None, "
                "string, list or dict."
            ) from None
        if isinstance(value, str) and len(split_values(f"x={text}")) > 1:
            text = json.dumps(value)
        texts.append(text)
    return ",".join(texts)
