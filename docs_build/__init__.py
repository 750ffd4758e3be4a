"""The documentation site's generated pages (``mkdocs.yml`` runs :mod:`docs_build.hooks`).

Each module builds one kind of page from the repository's own sources and returns
``{path under docs/: markdown}``; nothing it returns is committed. The modules need no
mkdocs, so the tests call them directly. Not part of the wheel (setup.py packages
``cl_bench*`` only).
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class DocsError(Exception):
    """A source of a generated page is wrong (a card, a measurement file): the build stops."""
