"""Type checks of the Python API's arguments (:mod:`cl_bench.api`, :func:`cl_bench.scenario`).

On the command line Typer parses every option into its type before cl-bench sees it. A
Python caller can pass anything, and a wrong type would surface as a TypeError or
AttributeError deep inside, after data or weights loaded, or worse be taken silently
(``seed=True`` as seed 1, a scenario ``"fmnist"`` as the names f, m, n, i, s, t). These
checks raise a :class:`UserError` naming the argument and what it must be before
anything loads or is written; the checks of values (ranges, names) are the CLI's own.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal, overload

from cl_bench.errors import UserError
from cl_bench.input_checks import check_seeds


def refuse(name: str, value: object, kind: str, example: str) -> UserError:
    """``name=value (type): name must be kind, e.g. example.``"""
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return UserError(
        f"{name}={shown} ({type(value).__name__}): {name} must be {kind}, e.g. {example}."
    )


@overload
def text(
    name: str,
    value: object,
    example: str,
    *,
    optional: Literal[False] = False,
    path: bool = False,
) -> str: ...
@overload
def text(
    name: str, value: object, example: str, *, optional: bool, path: bool = False
) -> str | None: ...
def text(
    name: str, value: object, example: str, *, optional: bool = False, path: bool = False
) -> str | None:
    """A string (a name, a device, a precision), or None where ``optional``; with
    ``path`` (``weights``: a name or a file) a pathlib.Path too, as its string."""
    if value is None and optional:
        return None
    if path and isinstance(value, os.PathLike):
        return os.fsdecode(value)  # a str, also for a path of bytes
    if not isinstance(value, str):
        raise refuse(name, value, "a string" + (" or None" if optional else ""), example)
    return value


def flag(name: str, value: object) -> bool:
    """True or False only: ``download="no"`` would otherwise mean yes."""
    if not isinstance(value, bool):
        raise refuse(name, value, "True or False", f"{name}=True")
    return value


def whole(name: str, value: object, example: str, *, optional: bool = False) -> int | None:
    """An integer (NumPy's too), not a bool, or None where ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise refuse(name, value, "an integer" + (" or None" if optional else ""), example)
    return int(value)


@overload
def folder(name: str, value: object, example: str, *, optional: Literal[False] = False) -> Path: ...
@overload
def folder(name: str, value: object, example: str, *, optional: bool) -> Path | None: ...
def folder(name: str, value: object, example: str, *, optional: bool = False) -> Path | None:
    """A path (a string or an os.PathLike), ``~`` expanded, or None where ``optional``
    (an empty string there too: no folder given)."""
    if optional and (value is None or isinstance(value, str) and not value):
        return None
    if not isinstance(value, (str, os.PathLike)) or isinstance(value, bytes):
        raise refuse(
            name,
            value,
            "a path (a string or a pathlib.Path)" + (" or None" if optional else ""),
            example,
        )
    return Path(value).expanduser()


def names(name: str, value: object, example: str) -> list[str]:
    """A comma-separated string (as on the command line) or an iterable of names; each
    name once, blanks dropped."""
    if isinstance(value, str):
        items: list[object] = value.split(",")
    elif isinstance(value, Iterable) and not isinstance(value, Mapping):
        items = list(value)
    else:
        raise refuse(name, value, "names: a comma-separated string or a list of strings", example)
    if not all(isinstance(item, str) for item in items):
        raise UserError(f"{name} must be names (strings), got {items!r}.")
    return list(dict.fromkeys(item.strip() for item in items if item.strip()))


def methods(value: object) -> list[str]:
    """Method names, at least one: an empty ``--methods ""`` is a slip, not "no method"."""
    found = names("methods", value, 'methods=["tosca", "simplecil"]')
    if not found:
        text = value if isinstance(value, str) else ",".join(map(str, value))
        raise UserError(
            f'--methods "{text}" names no method; give at least one (see '
            "`cl-bench list methods`), or omit --methods for the default set."
        )
    return found


def strings(name: str, value: object, example: str) -> list[str]:
    """A list (any iterable) of strings, kept as they are: ``--set`` values may hold commas."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise refuse(name, value, "a list of strings", example)
    items = list(value)
    if not all(isinstance(item, str) for item in items):
        raise UserError(f"{name} must be strings, e.g. {example}; got {items!r}.")
    return items


def seed(value: object) -> int:
    """One seed, in numpy's range (the CLI's check)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise refuse("seed", value, "an integer from 0 to 4294967295", "seed=1993")
    check_seeds([int(value)])
    return int(value)


def seeds(value: object) -> list[int]:
    """One seed or an iterable of seeds, each once, at least one (the CLI's checks)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        items: list[object] = [value]
    elif isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping)):
        items = list(value)
    else:
        raise refuse("seeds", value, "an integer or a list of integers", "seeds=[1993, 1994]")
    if any(isinstance(s, bool) or not isinstance(s, numbers.Integral) for s in items):
        raise UserError(f"seeds must be integers, e.g. seeds=[1993, 1994]; got {items!r}.")
    if not items:
        raise UserError("--seeds is empty; give at least one seed, e.g. --seeds 1993.")
    seed_list = list(dict.fromkeys(int(s) for s in items))
    check_seeds(seed_list)
    return seed_list


def mapping(name: str, value: object, example: str) -> Mapping:
    """A mapping, or None as an empty one."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise refuse(name, value, "a dict or None", example)
    return value


def callback(name: str, value: object) -> Callable | None:
    """A function to call, or None."""
    if value is not None and not callable(value):
        raise refuse(name, value, "a function or None", f"{name}=print")
    return value


def plugins(value: object) -> list:
    """Avalanche plugins (instances of ``avalanche.core.BasePlugin``, e.g. subclasses of
    ``SupervisedPlugin``): one, or an iterable of them."""
    from avalanche.core import BasePlugin

    example = "plugins=[MyPlugin()] (MyPlugin a subclass of avalanche.core.SupervisedPlugin)"
    if isinstance(value, (BasePlugin, type)):
        items: list[object] = [value]
    elif isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise refuse("plugins", value, "an Avalanche plugin or a list of them", example)
    else:
        items = list(value)
    for item in items:
        if isinstance(item, type):
            raise UserError(
                f"plugins holds the class {item.__qualname__}, not a plugin: give an "
                f"instance, e.g. plugins=[{item.__qualname__}()]."
            )
        if not isinstance(item, BasePlugin):
            also = (
                " For metrics sent to a logger of your own, give it as loggers= instead."
                if type(item).__name__ == "EvaluationPlugin"
                else ""
            )
            raise UserError(
                f"plugins holds {item!r} ({type(item).__name__}), not an Avalanche plugin: "
                f"each must be an instance of avalanche.core.BasePlugin, e.g. {example}.{also}"
            )
    return items


def loggers(value: object) -> list:
    """Avalanche loggers: an iterable of objects with a ``log_single_metric`` method."""
    example = "loggers=[InteractiveLogger()]"
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise refuse("loggers", value, "a list of Avalanche loggers", example)
    items = list(value)
    for item in items:
        if isinstance(item, type) or not callable(getattr(item, "log_single_metric", None)):
            raise UserError(
                f"loggers holds {item!r}, not a logger: each must be an object with a "
                f"log_single_metric(name, value, x_plot) method (an Avalanche logger), e.g. "
                f"{example}."
            )
    return items
