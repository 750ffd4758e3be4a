"""Code that is not ours, run so that it cannot take cl-bench down with it.

A card's strategy module and an entry-point package are other people's code,
imported while cl-bench reads its cards. Whatever they do at import time (raise,
hold a syntax error, call ``sys.exit``) must become one paragraph that names the
card or package and the error, exit 2, instead of a traceback or a silent exit
with the module's code; the commands and cards that do not need it keep working.
``KeyboardInterrupt`` is left alone: it is the user's, not the module's.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from cl_bench.errors import UserError


def describe(error: BaseException) -> str:
    """What went wrong and where, in one line: the exception and the innermost frame
    (the place to fix), or the line of a syntax error, or the exit code asked for."""
    if isinstance(error, SyntaxError):
        return f"{type(error).__name__} in {error.filename} line {error.lineno}: {error.msg}"
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if not f.filename.startswith("<frozen ")
    ]
    where = f" (at {frames[-1].filename} line {frames[-1].lineno})" if frames else ""
    if isinstance(error, SystemExit):
        return f"it called sys.exit({error.code!r}){where}"
    return f"{type(error).__name__}: {error}{where}"


@contextmanager
def contained(what: str, fix: str) -> Iterator[None]:
    """Run foreign code: a :class:`UserError` passes through; any other exception,
    ``SystemExit`` included, becomes ``"<what> failed: <error>. <fix>"``."""
    try:
        yield
    except UserError:
        raise
    except (Exception, SystemExit) as e:
        raise UserError(f"{what} failed: {describe(e)}. {fix}") from None


class MissingModule(UserError):
    """The module a card names does not exist (as opposed to a module that exists and
    imports one that does not: that is an error inside it, :func:`contained`'s case)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no module named {name!r}")
        self.name = name


def import_module(module: str) -> ModuleType:
    """``importlib.import_module``, telling a missing ``module`` (or a package above it)
    from a module that fails on an import of its own."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (module == e.name or module.startswith(f"{e.name}.")):
            raise MissingModule(e.name) from None
        raise
