"""The comments of a card's YAML text, which the YAML reader drops: a top-level block's
own comment and, per key of the block, the comment that explains it.

A card writes them in three ways, all read here::

    defaults:                 # the block's comment
      lr: 0.025               # the key's comment,
                              # continued below it (deeper than the keys)
      # a comment at the keys' indentation explains the key that follows it
      ewc_lambda: 500.0
      # one after the last key is a note on the whole block

Values are read from the text as written (``1.0e-8`` stays so); the callers check the
keys found against the parsed card and fall back to the block's text where they differ.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[^\s#'\"{\[][^:#]*?):(?:\s+|$)(?P<rest>.*)$")
_TOP = re.compile(r"^(?P<key>[A-Za-z_][\w.-]*):(?:\s+|$)")


@dataclass
class Block:
    """One top-level key of a card: its lines and the comments in them."""

    key: str
    lines: list[str]
    comment: str = ""
    values: dict[str, str] = field(default_factory=dict)  # key -> value as written
    comments: dict[str, str] = field(default_factory=dict)  # key -> its comment
    note: str = ""  # comments after the last key

    @property
    def text(self) -> str:
        return "\n".join(self.lines).rstrip() + "\n"


def split_comment(rest: str) -> tuple[str, str]:
    """(value, comment) of the text after ``key:``: a ``#`` starts a comment at the start
    or after a space, outside quotes."""
    quote = None
    for i, ch in enumerate(rest):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1].isspace()):
            return rest[:i].strip(), rest[i + 1 :].strip()
    return rest.strip(), ""


def _join(parts: list[str]) -> str:
    return " ".join(p for p in parts if p)


def blocks(text: str) -> dict[str, Block]:
    """Every top-level key of ``text`` with its comments (see the module docstring)."""
    found: dict[str, Block] = {}
    current: Block | None = None
    for line in text.splitlines():
        top = _TOP.match(line)
        if top:
            current = Block(top.group("key"), [line])
            current.comment = split_comment(line[top.end() :])[1]
            found[current.key] = current
        elif current is not None:
            current.lines.append(line)
    for block in found.values():
        _read_children(block)
    return found


def _read_children(block: Block) -> None:
    header = [block.comment]
    indent = None  # the indentation of the block's keys
    last = None  # the key the comments below it continue
    pending: list[str] = []  # comments at the keys' indentation, for the next key
    comments: dict[str, list[str]] = {}
    for line in block.lines[1:]:
        stripped = line.strip()
        if not stripped:
            continue
        lead = len(line) - len(line.lstrip())
        if stripped.startswith("#"):
            words = stripped.lstrip("#").strip()
            if indent is not None and lead == indent:
                pending.append(words)
            elif last is not None and not pending:
                comments[last].append(words)
            elif indent is None and last is None:
                header.append(words)
            else:
                pending.append(words)
            continue
        if indent is None:
            indent = lead
        if lead != indent:
            last = None if lead < indent else last  # a nested value: no comment of ours
            continue
        m = _KEY.match(line)
        if not m:
            continue
        key = m.group("key").strip()
        value, comment = split_comment(m.group("rest"))
        block.values[key] = value
        comments[key] = [*pending, comment]
        pending, last = [], key
    block.comment = _join(header)
    block.comments = {k: _join(v) for k, v in comments.items()}
    block.note = _join(pending)
