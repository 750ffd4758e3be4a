"""Every generated page of the site and the nav entries that list them.

:func:`generate` is what the mkdocs hook calls; it returns ``{path under docs/:
markdown}`` plus the nav sections, and runs :func:`docs_build.checks.check_method_pages`
over the generated pages and the hand-written ones it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from docs_build import api, changelog, checks, commands, methods, parity, performance, scenarios


@dataclass
class Site:
    pages: dict[str, str]
    sections: dict[str, list] = field(default_factory=dict)  # nav entry -> its pages
    optional: tuple[str, ...] = (changelog.PAGE,)  # nav entries dropped when not generated


def generate(handwritten: Mapping[str, str] | None = None, methods_dir: Path | None = None) -> Site:
    """All generated pages; ``handwritten``: the docs folder's own pages (path ->
    markdown), checked with them for links to method pages without a card."""
    from cl_bench.cards.places import METHODS_DIR

    methods_dir = methods_dir or METHODS_DIR
    cards = methods.load_methods(methods_dir)
    found = scenarios.load_scenarios()
    results = parity.load_results()
    pages: dict[str, str] = {}
    pages.update(
        methods.method_pages(cards, results, {s.name for s in found if s.kind == "scenario"})
    )
    pages.update(scenarios.scenario_pages(found, {c.name for c in cards}))
    pages.update(performance.performance_page())
    pages.update(parity.parity_page(results))
    pages.update(commands.command_page())
    pages.update(api.api_page())
    pages.update(changelog.changelog_page())
    checks.check_method_pages(
        {**(handwritten or {}), **pages}, [p.stem for p in methods.card_paths(methods_dir)]
    )
    return Site(pages, {methods.INDEX: methods.nav(cards), scenarios.INDEX: scenarios.nav(found)})


def fill_nav(nav: list, site: Site) -> list:
    """The configured nav with each generated section (an entry that names its index
    page) expanded into its pages, and optional pages that were not generated dropped."""
    out = []
    for entry in nav:
        if isinstance(entry, dict):
            ((title, target),) = entry.items()
        else:
            title, target = None, entry
        if isinstance(target, list):
            out.append({title: fill_nav(target, site)} if title else fill_nav(target, site))
        elif target in site.sections:
            out.append({title: site.sections[target]} if title else site.sections[target])
        elif target in site.optional and target not in site.pages:
            continue
        else:
            out.append(entry)
    return out
