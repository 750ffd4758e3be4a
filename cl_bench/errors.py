"""User-facing errors: one paragraph saying what is wrong and how to fix it.

The CLI turns a :class:`UserError` into that paragraph on stderr and exit code 2,
with no traceback; everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
import errno
import functools
from collections.abc import Callable, Iterable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class UserError(Exception):
    """Bad input from the user (names, data, weights, YAML), never a bug."""

    def paragraph(self) -> str:
        """The message alone. A UserError raised in a DataLoader worker comes back
        re-created with the worker's traceback in its text; keep only our message."""
        text = str(self)
        if "Traceback" in text:
            text = text.rsplit("UserError: ", 1)[-1]
        return " ".join(text.split())


def suggest(name: str, choices: Iterable[str]) -> str:
    """' Did you mean "x"?' for the closest known name, or ''."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f' Did you mean "{close[0]}"?' if close else ""


def unknown(kind: str, name: str, choices: Iterable[str]) -> UserError:
    """The standard error for an unknown method, scenario, backbone or key."""
    choices = sorted(choices)
    return UserError(
        f'Unknown {kind} "{name}".{suggest(name, choices)} Known {kind}s: {", ".join(choices)}.'
    )


def name_too_long(e: OSError) -> UserError | None:
    """The UserError for an OSError "File name too long", else None. Only a path the user
    gave can be too long (cl-bench's own names are short); it is met where that path is
    first looked at (``--data-root``, ``--weights``, ``--cards``, ``--results``), which is
    before anything is written. The folders cl-bench writes to are checked up front
    (:func:`cl_bench.input_checks.writable_dir`)."""
    if e.errno != errno.ENAMETOOLONG:
        return None
    name = str(e.filename or "")
    shown = name if len(name) <= 80 else f"{name[:40]}...{name[-30:]}"
    return UserError(
        f"The path {shown} is too long for the filesystem: a name in it is "
        "longer than a name may be (255 bytes on most filesystems), or the whole "
        "path longer than 4096 bytes. Choose a shorter path."
    )


def refuse_long_names(fn: Callable[P, R]) -> Callable[P, R]:
    """A public function raises :func:`name_too_long`'s UserError, not the OSError."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except OSError as e:
            error = name_too_long(e)
            if error is None:
                raise
            raise error from None

    return wrapper
