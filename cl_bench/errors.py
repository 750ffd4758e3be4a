"""User-facing errors: one paragraph saying what is wrong and how to fix it.

The CLI turns a :class:`UserError` into that paragraph on stderr and exit code 2,
with no traceback; everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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
        f'Unknown {kind} "{name}".{suggest(name, choices)} '
        f"Known {kind}s: {', '.join(choices)}."
    )
