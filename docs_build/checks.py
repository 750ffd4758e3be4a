"""Checks across the generated pages that a Markdown build cannot make by itself."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping

from docs_build import DocsError

_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_METHOD_PAGE = re.compile(r"methods/([^/]+)\.md")


def linked_pages(page: str, markdown: str) -> Iterable[str]:
    """The docs-relative paths of the ``.md`` pages a page links (external links and
    in-page anchors left out)."""
    base = posixpath.dirname(page)
    for target in _LINK.findall(markdown):
        target = target.split("#", 1)[0]
        if not target or re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
            continue
        yield posixpath.normpath(posixpath.join(base, target))


def check_method_pages(pages: Mapping[str, str], cards: Iterable[str]) -> None:
    """One method page per card and no other, and no page that links ``methods/X.md``
    for a method X without a card: else :class:`DocsError` naming what is wrong."""
    cards = set(cards)
    made = {m.group(1) for path in pages if (m := _METHOD_PAGE.fullmatch(path))} - {"index"}
    problems = []
    if made - cards:
        problems.append(f"method pages without a card: {', '.join(sorted(made - cards))}")
    if cards - made:
        problems.append(f"cards without a method page: {', '.join(sorted(cards - made))}")
    for page, markdown in sorted(pages.items()):
        for target in linked_pages(page, markdown):
            m = _METHOD_PAGE.fullmatch(target)
            if m and m.group(1) != "index" and m.group(1) not in cards:
                problems.append(
                    f"{page} links {target}, but there is no card methods/{m.group(1)}.yaml"
                )
    if problems:
        raise DocsError("method pages do not match the cards of methods/: " + "; ".join(problems))
