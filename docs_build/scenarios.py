"""The scenario pages, one per card of ``benchmarks/`` (scenarios, and suites such as
``ci``, which live beside them), and the scenarios index.

Built-in cards are read by cl-bench's own loaders (:func:`cl_bench.cards.catalogue.load_scenario`,
:func:`cl_bench.gate.suite.load_suite`); the class count, image counts and task
split come from the same functions a run and its dry run use.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from cl_bench.cards.card import Card
from docs_build import DocsError
from docs_build.md import code, table, text
from docs_build.yaml_comments import blocks

SECTION = "scenarios"
INDEX = f"{SECTION}/index.md"
PARAMS_LEFT_OUT = (
    "name",
    "title",
    "description",
    "bounds",
    "positive",
    "choices",
    "types",
    "backbone",
)


@dataclass
class Scenario:
    name: str
    path: Path
    kind: str  # "scenario" or "suite"
    raw: dict
    card: Card | None = None  # scenarios only


def load_scenarios(folder: Path | None = None) -> list[Scenario]:
    """The scenario and suite cards of ``folder`` (default: the built-in ``benchmarks/``),
    checked by cl-bench's loaders when built-in; other YAML files there are skipped, as
    cl-bench skips them."""
    from cl_bench.cards import catalogue, places
    from cl_bench.errors import UserError
    from cl_bench.gate.suite import load_suite

    folder = folder or places.BENCHMARKS_DIR
    builtin = folder.resolve() == places.BENCHMARKS_DIR.resolve()
    out = []
    for path in sorted(p for p in folder.glob("*.yaml") if not p.stem.startswith("_")):
        try:
            kind = catalogue.card_kind(path, "benchmarks")
            if kind is None:
                continue
            if kind == "suite":
                raw = load_suite(path.stem) if builtin else places.read_yaml(path)
                out.append(Scenario(path.stem, path, kind, raw))
                continue
            if builtin:
                card = catalogue.load_scenario(path.stem)
            else:
                raw = places.read_yaml(path)
                card = Card(
                    path.stem,
                    path,
                    raw,
                    copy.deepcopy({k: v for k, v in raw.items() if k not in PARAMS_LEFT_OUT}),
                )
            out.append(Scenario(path.stem, path, kind, card.raw, card))
        except UserError as e:
            raise DocsError(f"scenario card {path}: {e.paragraph()}") from None
    return out


def split(card: Card) -> tuple[int | None, str]:
    """(number of classes or None, the tasks in words)."""
    from cl_bench.scenarios.footprint import class_count
    from cl_bench.scenarios.order import task_split

    p = card.params
    n = class_count(card)
    if n is None:
        return None, (
            f"{p['init_cls']} classes in the first task, then {p['increment']} per "
            "task: the number of tasks follows from the classes found on disk"
        )
    sizes = task_split(n, p["init_cls"], p["increment"])
    same = len(set(sizes)) == 1
    words = (
        f"{len(sizes)} tasks of {sizes[0]} class{'es' * (sizes[0] != 1)}"
        if same
        else f"{len(sizes)} tasks: " + ", ".join(map(str, sizes)) + " classes"
    )
    return (
        n,
        f"{words} (B{0 if p['init_cls'] == p['increment'] else p['init_cls']} "
        f"Inc{p['increment']}: init_cls {p['init_cls']}, increment {p['increment']})",
    )


def order_words(spec: object) -> str:
    if spec == "seed":
        return (
            "`seed`: PILOT's permutation of the class ids by the run's seed "
            "(`np.random.RandomState(seed).permutation`), so each seed has its own order"
        )
    if spec == "natural":
        return "`natural`: class ids in their own order, whatever the seed"
    return f"a fixed list of class ids: {code(spec)}"


def images(card: Card) -> str:
    from cl_bench.scenarios.footprint import footprint

    found = footprint(card)
    if not found.train_images and not found.test_images:
        return "not stated on the card (`cl-bench data check` counts them)"
    return f"{found.train_images:,} train / {found.test_images:,} test"


def backbone(card: Card) -> str:
    from cl_bench.backbones import DEFAULT_BACKBONE
    from cl_bench.cards.protocol import scenario_backbone

    name, weights = scenario_backbone(card)
    found = blocks(card.path.read_text(encoding="utf-8")).get("backbone")
    why = f" ({text(found.comment)})" if found and found.comment else ""
    if name is None:
        return f"{code(DEFAULT_BACKBONE)}, cl-bench's default (the card names none)"
    weights = card.raw["backbone"].get("weights")
    return code(name) + (f", weights {code(weights)}" if weights else "") + why


def data_source(card: Card) -> list[str]:
    from cl_bench.scenarios import DISK_LOADERS, LOADERS
    from cl_bench.scenarios.folders import ARCHIVES, expected_tree

    p = card.params
    args = p.get("dataset_args") or {}
    lines = ["## Getting the data", ""]
    loader = LOADERS.get(p["dataset"])
    said = (loader.__doc__ or "").strip().split("\n\n")[0] if loader else ""
    if said:
        lines += [f"The {code(p['dataset'])} loader: {text(said)}", ""]
    if p["dataset"] == "imagefolder":
        where = Path("DATA_ROOT") / args["folder"] if args.get("folder") else Path("DATA_ROOT")
        lines += [
            f"Expected on disk: {text(expected_tree(where))}; PILOT's split, as in "
            f"{text(ARCHIVES)}.",
            "",
        ]
    root = " --data-root DIR" if p["dataset"] in DISK_LOADERS else " [--data-root DIR]"
    lines += [
        "Where a scenario reads files, give their folder with `--data-root DIR` (or "
        "`CL_BENCH_DATA=DIR`). Check the data before a run:",
        "",
        "```",
        f"cl-bench data check --scenario {card.name}{root}",
        "```",
        "",
        "It counts classes and images per split against the numbers above, lists links "
        "that lead nowhere and decodes every image; exit 0 means the data is as expected, "
        "2 that it is missing (the message shows the expected tree).",
        "",
    ]
    return lines


def scenario_page(s: Scenario) -> str:
    card = s.card
    p = card.params
    n, tasks = split(card)
    args = p.get("dataset_args") or {}
    comments = blocks(card.path.read_text(encoding="utf-8"))
    normalize = p.get("normalize")
    rows = [
        ("Dataset loader", code(p["dataset"])),
        ("Loader arguments", code(args) if args else "none"),
        ("Classes", str(n) if n is not None else "counted from disk"),
        ("Tasks", text(tasks)),
        ("Class order", order_words(p.get("class_order", "seed"))),
        (
            "Test order",
            "a seeded shuffle of the seen classes' test images"
            if p.get("test_shuffle")
            else "stored class by class, as PILOT's loader (`test_shuffle: false`)",
        ),
        ("Expected images", text(images(card))),
        ("Backbone", backbone(card)),
    ]
    if normalize is not None:
        why = comments["normalize"].comment if "normalize" in comments else ""
        rows.append(("Normalisation", code(normalize) + (f" ({text(why)})" if why else "")))
    lines = [
        f"# {text(card.title)}",
        "",
        text(card.raw.get("description", "")),
        "",
        *table(["Field", "Value"], rows),
        f"Run it: {code(f'cl-bench run --scenario {s.name}')}; change the split with "
        f"{code('--set scenario.init_cls=N --set scenario.increment=M')}. Card: "
        f"{code(f'benchmarks/{s.path.name}')}.",
        "",
        *data_source(card),
    ]
    return "\n".join(lines).rstrip() + "\n"


def suite_page(s: Scenario, methods: set[str]) -> str:
    raw = s.raw
    rows = []
    for entry in raw.get("runs") or []:
        names = entry.get("methods") or []
        names = [names] if isinstance(names, str) else names
        scen = entry.get("scenario", "")
        rows.append(
            (
                text(entry.get("name", "")),
                f"[{text(scen)}]({scen}.md)" if scen else "",
                code(entry.get("backbone", "")) if entry.get("backbone") else "",
                text(entry.get("weights", "")),
                text(entry.get("image_size", "")),
                text(entry.get("precision", "")),
                ", ".join(f"[{text(m)}](../methods/{m}.md)" for m in names),
                ", ".join(code(x) for x in entry.get("sets") or []),
                text(entry.get("note", "")),
            )
        )
    lines = [
        f"# Suite: {text(raw.get('title', s.name))}",
        "",
        text(raw.get("description", "")),
        "",
        f"Run it: {code(f'cl-bench check --suite {s.name}')}. Card: "
        f"{code(f'benchmarks/{s.path.name}')}."
        + (f" Threads: {raw['threads']}." if raw.get("threads") else ""),
        "",
        *table(
            [
                "run",
                "scenario",
                "backbone",
                "weights",
                "image size",
                "precision",
                "methods",
                "settings",
                "note",
            ],
            rows,
        ),
    ]
    return "\n".join(lines).rstrip() + "\n"


def index_page(scenarios: list[Scenario]) -> str:
    from cl_bench.backbones import DEFAULT_BACKBONE
    from cl_bench.cards.protocol import scenario_backbone

    rows, suites = [], []
    for s in scenarios:
        if s.kind == "suite":
            suites.append(
                (
                    f"[{text(s.name)}]({s.name}.md)",
                    text(" ".join(str(s.raw.get("description", "")).split()[:30])),
                )
            )
            continue
        n, tasks = split(s.card)
        name, _ = scenario_backbone(s.card)
        count = images(s.card)
        rows.append(
            (
                f"[{text(s.name)}]({s.name}.md)",
                text(s.card.title),
                str(n) if n is not None else "from disk",
                text(tasks.split(" (")[0]),
                text(count if count[0].isdigit() else "not stated"),
                code(name) if name else f"{code(DEFAULT_BACKBONE)} (default)",
            )
        )
    lines = [
        "# Scenarios",
        "",
        "One page per card of `benchmarks/`: a scenario is a dataset, a class order and "
        "a task split; `cl-bench list scenarios` lists them with those of `--cards` "
        "folders and installed packages.",
        "",
        *table(["scenario", "title", "classes", "tasks", "images", "backbone"], rows),
    ]
    if suites:
        lines += [
            "## Suites",
            "",
            "A suite is a list of runs that `cl-bench check --suite NAME` makes and "
            "compares with its baseline.",
            "",
            *table(["suite", "what"], suites),
        ]
    return "\n".join(lines).rstrip() + "\n"


def scenario_pages(scenarios: list[Scenario], methods: set[str] = frozenset()) -> dict[str, str]:
    """``{scenarios/index.md: ..., scenarios/<name>.md: ...}``."""
    pages = {INDEX: index_page(scenarios)}
    for s in scenarios:
        pages[f"{SECTION}/{s.name}.md"] = (
            suite_page(s, methods) if s.kind == "suite" else scenario_page(s)
        )
    return pages


def nav(scenarios: list[Scenario]) -> list:
    """The index, the scenarios, then the suites."""
    ordered = sorted(scenarios, key=lambda s: s.kind == "suite")
    return [
        INDEX,
        *(
            {(s.card.title if s.card else f"Suite: {s.name}"): f"{SECTION}/{s.name}.md"}
            for s in ordered
        ),
    ]
