"""The changelog page: the repository's ``CHANGELOG.md`` as it is, when there is one."""

from __future__ import annotations

from pathlib import Path

from docs_build import ROOT

PAGE = "changelog.md"


def changelog_page(path: Path = ROOT / "CHANGELOG.md") -> dict[str, str]:
    """``{changelog.md: its text}``, or nothing without the file (the nav drops the page)."""
    return {PAGE: path.read_text(encoding="utf-8")} if path.is_file() else {}
