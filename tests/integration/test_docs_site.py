"""The documentation site's generated pages (docs_build/, run by mkdocs.yml's hook): one
method page per card and no page naming a method without one, one page per scenario
card, the performance page from the measurement files (a malformed one refused by name),
the parity page as the parity renderer writes it, and the whole site built with --strict.
"""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import pytest

from docs_build import DocsError, checks, methods, pages, parity, performance, scenarios
from docs_build.commands import WIDTH, command_page

ROOT = Path(__file__).resolve().parents[2]


def plain(markdown: str) -> str:
    """Markdown without its escapes, to look for the words a reader sees."""
    return html.unescape(markdown.replace("\\", ""))


@pytest.fixture(scope="module")
def built_in() -> dict[str, str]:
    """The method and scenario pages of the built-in cards (loaded once: the cards import
    their strategies)."""
    found = scenarios.load_scenarios()
    return {
        **methods.method_pages(
            methods.load_methods(),
            parity.load_results(),
            {s.name for s in found if s.kind == "scenario"},
        ),
        **scenarios.scenario_pages(found),
    }


def method_cards(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.yaml") if not p.stem.startswith("_")}


# (a) method pages ------------------------------------------------------------------------


def test_one_method_page_per_card_and_an_index(built_in):
    made = {
        p.removeprefix("methods/").removesuffix(".md") for p in built_in if p.startswith("methods/")
    }
    assert made == method_cards(ROOT / "methods") | {"index"}
    checks.check_method_pages(built_in, method_cards(ROOT / "methods"))
    index = built_in["methods/index.md"]
    for name in method_cards(ROOT / "methods"):
        assert f"[{name}]({name}.md)" in plain(index)


def test_tosca_page_shows_its_card(built_in):
    page = plain(built_in["methods/tosca.md"])
    assert page.startswith("# TOSCA\n")
    assert "*Unlocking [CLS] Features for Continual Post-Training*" in page
    assert "Yildirim, Gok Yildirim, Vanschoren." in page
    assert "<https://github.com/muratonuryildirim/tosca>" in page
    assert "| Inputs | `features` — reads only the frozen final [CLS] / pooled feature |" in page
    assert "| In the default run | yes |" in page
    # a default with its comment from the YAML text, the value as the card writes it
    assert "| `lr` | `0.025` |  |" in page
    assert "| `eta_min` | `1.0e-8` |  |" in page
    assert (
        "| `selection` | `sample` | sample: lowest entropy per image (fair); batch: "
        "lowest batch-mean entropy (official code, leaks task id) |"
    ) in page
    assert (
        "| `eta_min` | from 0 to the value of lr | the cosine schedule's floor: above lr "
        "it would raise the rate |"
    ) in page
    assert "| `lr` | greater than 0 |  |" in page
    assert "| `selection` | `batch` | official code models/tosca.py" in page  # paper protocol
    assert "- Frozen features are stored in fp16" in page  # departures
    assert "| [imagenet-r](../scenarios/imagenet-r.md) | 83.3 | 80.0 |" in page  # published
    assert "Protocol: paper, batch selection, class-ordered test batches of 48" in page
    # its parity row, through the parity renderer's own cells, and where the row is
    assert "(within 1.0e-05)" in page and "| Verdict | **agrees** |" in page
    assert "[Parity: tosca](../parity.md#tosca)" in page
    assert "`bench/parity/results/tosca.json`" in page
    assert "Per task t a fresh LuCA_t is trained" in page  # the strategy's own account


def test_a_block_comment_explains_the_next_default_and_a_last_one_the_block(built_in):
    page = plain(built_in["methods/ewc.md"])
    assert "| `ewc_lambda` | `500.0` | PyCIL models/ewc.py: lamda 1000 times" in page
    assert "The penalty's reach at these values" in page.split("## Bounds")[0]
    assert "No parity row" not in page
    assert "No parity row" in built_in["methods/finetune.md"]  # no bench/parity file


def copy_cards(folder: Path, *names: str) -> Path:
    folder.mkdir()
    for name in names:
        shutil.copy(ROOT / "methods" / f"{name}.yaml", folder / f"{name}.yaml")
    return folder


def test_a_method_page_without_a_card_or_a_card_without_a_page_is_refused(tmp_path):
    folder = copy_cards(tmp_path / "cards", "tosca", "simplecil")
    made = methods.method_pages(methods.load_methods(folder), [])
    assert set(made) == {"methods/index.md", "methods/tosca.md", "methods/simplecil.md"}
    checks.check_method_pages(made, method_cards(folder))
    (folder / "simplecil.yaml").unlink()  # a card gone: its page names no card
    with pytest.raises(DocsError, match="method pages without a card: simplecil"):
        checks.check_method_pages(made, method_cards(folder))
    shutil.copy(ROOT / "methods" / "ewc.yaml", folder / "ewc.yaml")  # a card with no page
    with pytest.raises(DocsError, match="cards without a method page: ewc"):
        checks.check_method_pages(made, method_cards(folder))


def test_a_page_that_links_a_method_without_a_card_is_refused(tmp_path):
    folder = copy_cards(tmp_path / "cards", "tosca")
    made = methods.method_pages(methods.load_methods(folder), [])
    checks.check_method_pages(
        {**made, "usage.md": "see [TOSCA](methods/tosca.md#defaults)"}, {"tosca"}
    )
    with pytest.raises(
        DocsError,
        match=r"scenarios/ci\.md links methods/ewc\.md, but there "
        r"is no card methods/ewc\.yaml",
    ):
        checks.check_method_pages(
            {**made, "scenarios/ci.md": "[ewc](../methods/ewc.md)"}, {"tosca"}
        )
    # the hook's generation runs the check: the ci suite names methods this folder lacks
    with pytest.raises(DocsError, match=r"scenarios/ci\.md links methods/ranpac\.md"):
        pages.generate({}, methods_dir=folder)


# (b) scenario pages ----------------------------------------------------------------------


def test_one_scenario_page_per_benchmarks_card(built_in):
    cards = {p.stem for p in (ROOT / "benchmarks").glob("*.yaml")}
    made = {
        p.removeprefix("scenarios/").removesuffix(".md")
        for p in built_in
        if p.startswith("scenarios/")
    }
    assert made == cards | {"index"}
    cifar = plain(built_in["scenarios/cifar100.md"])
    assert cifar.startswith("# CIFAR-100\n")
    assert "| Tasks | 20 tasks of 5 classes (B0 Inc5: init_cls 5, increment 5) |" in cifar
    assert "| Expected images | 50,000 train / 10,000 test |" in cifar
    assert "`vit_base_patch16_224`, weights `vit_base_patch16_224.augreg_in21k`" in cifar
    assert "cl-bench data check --scenario cifar100 --data-root DIR" in cifar
    inr = plain(built_in["scenarios/imagenet-r.md"])
    assert "DATA_ROOT/imagenet-r/train/<class>/<image>.jpg" in inr
    assert "| Classes | 200 |" in inr and "10 tasks of 20 classes" in inr
    suite = plain(built_in["scenarios/ci.md"])
    assert "[coda-prompt](../methods/coda-prompt.md)" in suite and "`ranpac.M=2000`" in suite


# (c) performance page --------------------------------------------------------------------

FIGURES = """\
- id: x
  title: Extraction throughput
  measures: images per second of the frozen backbone
  command: python -m bench.run x
  target: ">= 100 img/s"
- id: y
  title: Nothing measured yet
  measures: something
  command: python -m bench.run y
  target: none
"""


def measurement(
    folder: Path,
    name: str,
    figure: str,
    date: str,
    cpu: str,
    precision: str,
    commit: str,
    value: str,
) -> None:
    record = {
        "figure": figure,
        "meta": {
            "date": date,
            "cpu": cpu,
            "precision": precision,
            "commit": commit,
            "command": f"python -m bench.run {figure}",
        },
        "headline": [{"label": "throughput", "value": value}],
        "raw": [1, 2],
    }
    (folder / name).write_text(json.dumps(record), encoding="utf-8")


@pytest.fixture
def bench_folder(tmp_path) -> tuple[Path, Path]:
    results = tmp_path / "results"
    results.mkdir()
    (tmp_path / "figures.yaml").write_text(FIGURES, encoding="utf-8")
    measurement(
        results,
        "x-2026-11-30-epyc.json",
        "x",
        "2026-11-30",
        "AMD EPYC, 2 cores",
        "bf16",
        "4e6a62e",
        "150 img/s",
    )
    measurement(
        results,
        "x-2026-12-06-xeon.json",
        "x",
        "2026-12-06",
        "Intel Xeon with AMX, 2 cores",
        "fp32",
        "c9a5b32",
        "210 img/s",
    )
    measurement(
        results,
        "x-2026-12-02-old.json",
        "x",
        "2026-12-02",
        "AMD EPYC, 2 cores",
        "fp32",
        "301e76a",
        "120 img/s",
    )
    return results, tmp_path / "figures.yaml"


def test_performance_page_shows_each_measurement_newest_first(bench_folder):
    page = plain(performance.performance_page(*bench_folder)["performance.md"])
    section = page.split("## Extraction throughput")[1].split("## Nothing measured yet")[0]
    assert "**Measures:** images per second of the frozen backbone" in section
    assert "**Command:** `python -m bench.run x`" in section and ">= 100 img/s" in section
    current, history = section.split("### History")
    assert "### Current: 2026-12-06" in current
    assert (
        "Measured 2026-12-06 on Intel Xeon with AMX, 2 cores, precision fp32, commit `c9a5b32`"
    ) in current
    assert "| throughput | 210 img/s |" in current
    rows = [line for line in history.splitlines() if line.startswith("| 2026-")]
    assert rows == [
        "| 2026-12-06 | Intel Xeon with AMX, 2 cores | fp32 | `c9a5b32` | throughput: 210 img/s |",
        "| 2026-12-02 | AMD EPYC, 2 cores | fp32 | `301e76a` | throughput: 120 img/s |",
        "| 2026-11-30 | AMD EPYC, 2 cores | bf16 | `4e6a62e` | throughput: 150 img/s |",
    ]
    assert "No measurement yet." in page.split("## Nothing measured yet")[1]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "JSON"),
        (
            '{"figure": "x", "meta": {"date": "2026-12-07", "precision": "fp32", "commit": '
            '"4e6a62e"}, "headline": [{"label": "a", "value": "1"}]}',
            "'meta' must give",
        ),
        ('{"figure": "z", "meta": {}, "headline": []}', "'figure' must be one of"),
    ],
)
def test_a_malformed_measurement_is_refused_by_name(bench_folder, content, why):
    results, figures = bench_folder
    (results / "x-2026-12-07-broken.json").write_text(content, encoding="utf-8")
    with pytest.raises(DocsError, match=why) as refused:
        performance.performance_page(results, figures)
    assert "x-2026-12-07-broken.json" in str(refused.value)


def test_the_committed_measurements_make_a_page():
    page = performance.performance_page()["performance.md"]
    assert page.startswith("# Performance\n")


# (d) parity page -------------------------------------------------------------------------


def test_parity_page_is_what_the_parity_renderer_writes():
    from bench.parity import render, schema

    made = parity.parity_page(parity.load_results())
    assert made == {"parity.md": render.render(schema.load_all())}
    for data in schema.load_all():  # the anchors method pages link
        assert f"\n## {data['method']}\n" in made["parity.md"]
        assert parity.anchor(data["method"]) == data["method"]


# the other generated pages ---------------------------------------------------------------


def test_command_reference_holds_every_command_at_the_fixed_width():
    page = command_page()["commands.md"]
    for name in (
        "cl-bench",
        "cl-bench run",
        "cl-bench data",
        "cl-bench data check",
        "cl-bench list",
    ):
        assert f"\n## {name}\n" in page
    assert "Usage: cl-bench data check [OPTIONS]" in page
    code = [
        line
        for block in page.split("```text\n")[1:]
        for line in block.split("\n```")[0].splitlines()
    ]
    assert code and max(len(line) for line in code) <= WIDTH
    assert "\x1b[" not in page


def test_nav_lists_every_generated_page(built_in):
    site = pages.Site(
        dict(built_in),
        {
            methods.INDEX: methods.nav(methods.load_methods()),
            scenarios.INDEX: scenarios.nav(scenarios.load_scenarios()),
        },
    )
    nav = pages.fill_nav(
        [
            {"Home": "index.md"},
            {"Methods": "methods/index.md"},
            {"Scenarios": "scenarios/index.md"},
            {"Changelog": "changelog.md"},
        ],
        site,
    )
    assert nav[0] == {"Home": "index.md"} and len(nav) == 3  # no changelog generated here
    listed = [
        next(iter(e.values())) if isinstance(e, dict) else e
        for section in nav[1:]
        for e in next(iter(section.values()))
    ]
    assert sorted(listed) == sorted(built_in)


# (e) the whole site ----------------------------------------------------------------------


def test_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(tmp_path / "site"), strict=True)
    build(config)  # raises mkdocs.exceptions.Abort on any warning
    site = tmp_path / "site"
    tosca = (site / "methods" / "tosca" / "index.html").read_text(encoding="utf-8")
    assert "Unlocking [CLS] Features for Continual Post-Training" in tosca
    assert "<code>0.025</code>" in tosca
    assert 'href="../../parity/#tosca"' in tosca
    assert 'id="tosca"' in (site / "parity" / "index.html").read_text(encoding="utf-8")
    assert (site / "scenarios" / "imagenet-r" / "index.html").is_file()
    assert (site / "commands" / "index.html").is_file()
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="cl_bench.api.run"' in api
    assert ":func:" not in api and ":class:" not in api  # Sphinx roles shown as code
