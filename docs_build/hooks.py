"""mkdocs hooks (``hooks:`` in mkdocs.yml): the generated pages of :mod:`docs_build`
become virtual files of the build, and the nav lists them. Nothing generated is
written into ``docs/``. A wrong source (a card, a measurement file, a parity result)
stops the build with its name."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]


def _importable() -> None:
    """The repository root on sys.path: docs_build and bench are imported from there
    (mkdocs loads this file by path, and restores sys.path after loading it)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


_importable()

from docs_build import DocsError  # noqa: E402
from docs_build.pages import Site, fill_nav, generate  # noqa: E402

log = logging.getLogger("mkdocs.hooks.docs_build")
_site: Site | None = None


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    global _site
    _importable()
    docs = Path(config.docs_dir)
    handwritten = {
        p.relative_to(docs).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(docs.rglob("*.md"))
    }
    try:
        _site = generate(handwritten)
    except DocsError as e:
        raise PluginError(f"docs_build: {e}") from None
    if config.nav is not None:
        config.nav = fill_nav(config.nav, _site)
    log.info("docs_build: %d generated pages", len(_site.pages))
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    assert _site is not None, "on_config runs first"
    for path, markdown in _site.pages.items():
        if files.get_file_from_path(path) is not None:
            raise PluginError(
                f"docs_build: docs/{path} exists, and the build generates "
                f"{path}: rename or remove the hand-written page."
            )
        files.append(File.generated(config, path, content=markdown))
    return files
