"""The method pages, one per card of ``methods/``, and the methods index.

Built-in cards are read by cl-bench's own loader (:func:`cl_bench.cards.catalogue.load_method`:
the card checked whole, its strategy imported); the comments of the card's YAML text
(:mod:`docs_build.yaml_comments`) explain its defaults and bounds.
"""

from __future__ import annotations

import copy
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

from cl_bench.cards.card import Card
from docs_build import DocsError
from docs_build.md import block, code, docstring, table, text
from docs_build.yaml_comments import Block, blocks

SECTION = "methods"
INDEX = f"{SECTION}/index.md"


@dataclass
class Method:
    """A method card with what its page shows beside the card itself."""

    card: Card
    blocks: dict[str, Block]
    inputs: str
    backbones: str
    module_doc: str

    @property
    def name(self) -> str:
        return self.card.name

    @property
    def raw(self) -> dict:
        return self.card.raw


def card_paths(folder: Path) -> list[Path]:
    """The method cards of a folder, as cl-bench finds them (``_*.yaml`` are not cards)."""
    return sorted(p for p in folder.glob("*.yaml") if not p.stem.startswith("_"))


def load_methods(folder: Path | None = None) -> list[Method]:
    """The cards of ``folder`` (default: the built-in ``methods/``). Built-in cards go
    through :func:`~cl_bench.cards.catalogue.load_method`; another folder's are read as
    YAML (cl-bench looks cards up by name, and these names are the built-in ones)."""
    from cl_bench.cards import catalogue, places
    from cl_bench.errors import UserError

    folder = folder or places.METHODS_DIR
    builtin = folder.resolve() == places.METHODS_DIR.resolve()
    out = []
    for path in card_paths(folder):
        try:
            if builtin:
                card = catalogue.load_method(path.stem)
            else:
                raw = places.read_yaml(path)
                card = Card(path.stem, path, raw, copy.deepcopy(raw.get("defaults") or {}))
            out.append(describe(card))
        except UserError as e:
            raise DocsError(f"method card {path}: {e.paragraph()}") from None
    return out


def describe(card: Card) -> Method:
    """The card with its comments, its strategy's declared inputs and backbones (what
    runs; the card's own keys repeat them) and the strategy module's docstring."""
    from cl_bench.cards.declared import declared
    from cl_bench.cards.strategy import strategy_of

    cls = strategy_of(card)
    said = declared(cls)
    module = importlib.import_module(cls.__module__)
    return Method(
        card,
        blocks(card.path.read_text(encoding="utf-8")),
        said["inputs"],
        said["backbones"],
        module.__doc__ or "",
    )


def comment(method: Method, key: str) -> str:
    found = method.blocks.get(key)
    return found.comment if found else ""


def citation(raw: dict) -> list[str]:
    cite = raw.get("citation") or {}
    parts = []
    if cite.get("authors"):
        parts.append(text(cite["authors"]) + ".")
    if cite.get("title"):
        parts.append(f"*{text(cite['title'])}*.")
    if cite.get("venue"):
        parts.append(text(cite["venue"]) + ".")
    lines = [" ".join(parts), ""] if parts else []
    if cite.get("code"):
        lines += [f"Code: {link_urls(str(cite['code']))}", ""]
    return lines


def link_urls(value: str) -> str:
    """Text with its http(s) addresses as links."""
    pieces = re.split(r"(https?://\S+)", value)
    return "".join(f"<{p}>" if p.startswith("http") else text(p) for p in pieces)


def yes_no(flag: object) -> str:
    return "yes" if flag else "no"


def glance(method: Method) -> list[str]:
    raw = method.raw
    rows = [
        (
            "Inputs",
            " — ".join(filter(None, [code(method.inputs), text(comment(method, "inputs"))])),
        ),
        ("Backbones", code(method.backbones)),
        (
            "In the default run",
            " — ".join(
                filter(None, [yes_no(raw.get("default_run")), text(comment(method, "default_run"))])
            ),
        ),
        ("Strategy", code(raw["strategy"])),
        ("Card", code(f"methods/{method.card.path.name}")),
        ("Run it", code(f"cl-bench run --methods {method.name}")),
    ]
    return table(["Field", "Value"], rows)


def mechanics(method: Method) -> list[str]:
    raw = method.raw
    what = {
        "features": "the frozen backbone's final feature (from the feature cache); it "
        "trains nothing inside the backbone",
        "adapted-features": "images on the first task (first-session adaptation of "
        "the backbone), then the cached features of the adapted "
        "backbone",
        "images": "images, through the backbone in every step",
        "images+query": "images, through the frozen ViT with its trained prompts, plus "
        "the frozen query feature from the feature cache",
    }
    lines = [
        f"{text(method.card.title)} reads {what.get(method.inputs, code(method.inputs))}"
        f" ({code('inputs: ' + method.inputs)}); it runs on "
        + (
            "any backbone"
            if method.backbones == "any"
            else f"{code(method.backbones)} backbones only"
        )
        + (
            ". It is part of the default run (`cl-bench run` without `--methods`)."
            if raw.get("default_run")
            else ". It is not in the default run: name it with `--methods`."
        )
    ]
    doc = method.module_doc.strip().split("\n\n", 1)
    if doc[0].count('"') >= 2:  # a first paragraph that cites the paper, as the page does
        doc = doc[1:]
    if doc and doc[0]:
        lines += ["", f"From the strategy's module ({code(raw['strategy'].split(':')[0])}):", ""]
        lines += docstring("\n\n".join(doc))
    if raw.get("accounting"):
        lines += ["", f"**What it stores and computes.** {text(raw['accounting'])}"]
    return ["## How it works", "", *lines, ""]


def defaults(method: Method) -> list[str]:
    own = method.raw.get("defaults") or {}
    found = method.blocks.get("defaults")
    lines = ["## Defaults", ""]
    if found and found.comment:
        lines += [f"Source: {text(found.comment)}", ""]
    if found and list(found.values) == [str(k) for k in own]:
        lines += table(
            ["setting", "default", "explanation"],
            [(code(k), code(v), text(found.comments.get(k, ""))) for k, v in found.values.items()],
        )
        if found.note:
            lines += [text(found.note), ""]
    else:  # a layout the comment reader does not know: the block as written
        lines += block(found.text if found else _dump({"defaults": own}), "yaml")
    when = method.blocks.get("defaults_when")
    if when:
        lines += [
            "Defaults that depend on another setting (`defaults_when:`; a `--set` value wins):",
            "",
        ]
        lines += block(when.text, "yaml")
    lines += [f"Change one with {code(f'--set {method.name}.<setting>=<value>')}.", ""]
    return lines


def _dump(value: object) -> str:
    import yaml

    return yaml.safe_dump(value, sort_keys=False)


def _limit(value: object) -> str:
    """A bound in words: a number, another setting's value (by name), or none ("")."""
    if value is None:
        return ""
    return f"the value of {value}" if isinstance(value, str) else str(value)


def bounds(method: Method) -> list[str]:
    rules = method.card.rules()
    found = method.blocks.get("bounds")
    notes = found.comments if found else {}
    allowed: dict[str, list[str]] = {}
    for key, (low, high) in rules["bounds"].items():
        lo, hi = _limit(low), _limit(high)
        allowed.setdefault(key, []).append(
            f"from {lo} to {hi}"
            if lo and hi
            else f"at least {lo}"
            if lo
            else f"at most {hi}"
            if hi
            else "any number"
        )
    for key in rules["positive"]:
        allowed.setdefault(key, []).append("greater than 0")
    for key, values in rules["choices"].items():
        allowed.setdefault(key, []).append("one of " + ", ".join(map(str, values)))
    for key, kinds in rules["types"].items():
        allowed.setdefault(key, []).append("also " + " or ".join(map(str, kinds)))
    if not allowed:
        return []
    lines = [
        "## Bounds",
        "",
        "Every setting is checked before anything runs; a `--set` value outside these "
        "is refused with the rule it breaks. Bounds include both ends.",
        "",
    ]
    lines += table(
        ["setting", "allowed", "note"],
        [(code(k), text("; ".join(v)), text(notes.get(k, ""))) for k, v in allowed.items()],
    )
    return lines


def paper(method: Method) -> list[str]:
    block_ = method.raw.get("paper")
    if block_ is None:
        return []
    lines = ["## The paper protocol", ""]
    said = comment(method, "paper")
    if said:
        lines += [text(said), ""]
    if block_:
        lines += ["`--protocol paper` sets:", ""]
        lines += table(
            ["setting", "value", "source"],
            [
                (code(k), code(_flow(e.get("value"))), text(e.get("source", "")))
                for k, e in block_.items()
            ],
        )
    else:
        lines += ["`--protocol paper` changes no setting of this method.", ""]
    return lines


def search(method: Method) -> list[str]:
    """The card's ``search:`` block: what ``cl-bench tune`` searches by default."""
    block_ = method.raw.get("search")
    lines = ["## Tuning", ""]
    if not block_:
        return [*lines, "The card declares no search space; `cl-bench tune` needs `--space`.", ""]
    rows = []
    for key, spec in block_.items():
        if isinstance(spec, list):
            rows.append((code(key), ", ".join(code(_flow(v)) for v in spec)))
        else:
            scale = " (log scale)" if spec.get("log") else ""
            rows.append((code(key), f"{_flow(spec['low'])} to {_flow(spec['high'])}{scale}"))
    return [
        *lines,
        "`cl-bench tune` searches these settings by default, scored on a validation split "
        "of the training data ([usage](../usage.md#tune)):",
        "",
        *table(["setting", "searched over"], rows),
    ]


def _flow(value: object) -> str:
    import yaml

    out = yaml.safe_dump(value, default_flow_style=True).strip()
    return out[:-4] if out.endswith("\n...") else out.removesuffix("...").strip()


def departures(method: Method) -> list[str]:
    items = method.raw.get("departures") or []
    lines = ["## Departures", ""]
    said = comment(method, "departures")
    if said:
        lines += [f"{text(said[0].upper() + said[1:])}.", ""]
    if not items:
        return [*lines, "The card lists none.", ""]
    return [*lines, *[f"- {text(item)}" for item in items], ""]


def published(method: Method, scenarios: set[str]) -> list[str]:
    pub = method.raw.get("published")
    lines = ["## Published numbers", ""]
    if not pub:
        return [*lines, "The card has none.", ""]
    lines += [f"Protocol: {text(pub.get('protocol', ''))}.", ""]
    found = method.blocks.get("published")
    if found and found.comment:
        lines += [f"{text(found.comment)}.", ""]
    if found and found.note:
        lines += [text(found.note), ""]
    results = pub.get("results") or {}
    metrics = list(dict.fromkeys(k for v in results.values() for k in (v or {})))
    lines += table(
        ["scenario", *metrics],
        [
            (
                f"[{text(s)}](../scenarios/{s}.md)" if s in scenarios else text(s),
                *(str((v or {}).get(m, "")) for m in metrics),
            )
            for s, v in results.items()
        ],
        ["l", *["r"] * len(metrics)],
    )
    lines += ["`cl-bench report` shows these beside the measured numbers.", ""]
    return lines


def method_page(method: Method, parity: dict | None, scenarios: set[str]) -> str:
    from docs_build.parity import parity_row

    lines = [
        f"# {text(method.card.title)}",
        "",
        *citation(method.raw),
        *glance(method),
        *mechanics(method),
        *defaults(method),
        *bounds(method),
        *paper(method),
        *search(method),
        *departures(method),
        *published(method, scenarios),
        "## Parity",
        "",
    ]
    if parity is None:
        lines += ["No parity row: `bench/parity/results/` has no file for this method.", ""]
    else:
        lines += parity_row(parity, "../parity.md")
    return "\n".join(lines).rstrip() + "\n"


def index_page(methods: list[Method]) -> str:
    rows = []
    for m in methods:
        cite = m.raw.get("citation") or {}
        rows.append(
            (
                f"[{text(m.name)}]({m.name}.md)",
                text(cite.get("title", "")),
                " — ".join(filter(None, [code(m.inputs), text(comment(m, "inputs"))])),
                code(m.backbones),
                yes_no(m.raw.get("default_run")),
            )
        )
    lines = [
        "# Methods",
        "",
        "One page per method card of `methods/`: its citation, what it reads and "
        "trains, its defaults and their bounds, where it departs from the reference "
        "code, the published numbers and its parity row. `cl-bench list methods` lists "
        "the same cards, with those of `--cards` folders and installed packages.",
        "",
        *table(
            ["method", "paper", "inputs (what it trains)", "backbones", "in the default run"], rows
        ),
    ]
    return "\n".join(lines).rstrip() + "\n"


def method_pages(
    methods: list[Method], parity: list[dict], scenarios: set[str] = frozenset()
) -> dict[str, str]:
    """``{methods/index.md: ..., methods/<name>.md: ...}``."""
    by_method = {d["method"]: d for d in parity}
    pages = {INDEX: index_page(methods)}
    for m in methods:
        pages[f"{SECTION}/{m.name}.md"] = method_page(m, by_method.get(m.name), scenarios)
    return pages


def nav(methods: list[Method]) -> list:
    return [INDEX, *({m.card.title: f"{SECTION}/{m.name}.md"} for m in methods)]
