"""Sweeps: ``--set owner.key=a,b,c`` gives one configuration per value.

A value is split at its top-level commas only: a comma inside brackets, braces or quotes
belongs to a YAML flow value (``scenario.dataset_args={train_per_class: 6, size: 8}``,
``scenario.class_order=[1,2,3]``, ``x="a,b"``) and does not split it. Several swept
settings give their cartesian product, the first ``--set`` varying slowest. Each
configuration is the list of plain ``owner.key=value`` items that a single ``--set`` per
setting would give, so a swept run has the identity (config hash) of that single run.
"""

from __future__ import annotations

import itertools

from cl_bench.errors import UserError

OPENING = {"[": "]", "{": "}"}


def split_values(item: str) -> list[str]:
    """``"tosca.lr=0.01,0.05"`` -> ``["0.01", "0.05"]``; a value without a top-level comma
    -> itself alone. Refuses an empty value between commas and unbalanced brackets."""
    _, _, value = item.partition("=")
    parts, depth, quote, start = [], [], "", 0
    for i, ch in enumerate(value):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'" and (i == start or value[start:i].strip() == ""):
            quote = ch
        elif ch in OPENING:
            depth.append(OPENING[ch])
        elif ch in "]}":
            if not depth or depth.pop() != ch:
                raise _unbalanced(item)
        elif ch == "," and not depth:
            parts.append(value[start:i])
            start = i + 1
    if depth or quote:
        raise _unbalanced(item)
    parts.append(value[start:])
    if len(parts) > 1 and any(not p.strip() for p in parts):
        raise UserError(
            f'--set "{item}" has an empty value between its commas: a sweep lists its '
            "values separated by single commas, e.g. --set tosca.lr=0.01,0.05."
        )
    return [p.strip() for p in parts] if len(parts) > 1 else [value]


def _unbalanced(item: str) -> UserError:
    return UserError(
        f'--set "{item}" has an unclosed bracket, brace or quote: close it, e.g. '
        "--set scenario.class_order=[1,2,3] or --set 'scenario.dataset_args={size: 8}'."
    )


def expand_sets(items: list[str]) -> list[list[str]]:
    """The configurations of ``--set`` items: one list of single-valued items per
    combination of the swept values (a list with the items unchanged when none sweeps).
    A setting swept twice, or swept to the same value twice, is refused."""
    choices: list[list[str]] = []
    swept: dict[str, str] = {}
    for item in items:
        values = split_values(item)
        head = item.partition("=")[0]
        if len(values) > 1:
            if head.strip() in swept:
                raise UserError(
                    f'--set "{item}" sweeps {head} a second time (also --set '
                    f'"{swept[head.strip()]}"): list all its values in one --set.'
                )
            if len(set(values)) < len(values):
                raise UserError(
                    f'--set "{item}" names a value twice: each value is one configuration; '
                    "list each once."
                )
            swept[head.strip()] = item
            choices.append([f"{head}={v}" for v in values])
        else:
            choices.append([item])
    return [list(combo) for combo in itertools.product(*choices)]


def swept_items(items: list[str]) -> list[str]:
    """The heads (``owner.key``) of the items that sweep, in order."""
    return [item.partition("=")[0].strip() for item in items if len(split_values(item)) > 1]
