"""`cl-bench report` on hand-made result files: aggregation, row identity, every format
parsed back, plot files, and the HTML rendered in headless Chromium."""

from __future__ import annotations

import base64
import io
import re
import shutil
import statistics
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from cl_bench.contract import EVAL_BATCH_SIZE
from cl_bench.errors import UserError
from cl_bench.metrics import summarize
from cl_bench.reporting.latex import escape
from cl_bench.reporting.plots import PIXELS
from cl_bench.reporting.report import METRICS, aggregate, grid, load_runs, to_csv
from cl_bench.source_identity import RUNNER, file_digest, label
from cl_bench.store import results
from cl_bench.store.protocol_block import protocol_block
from cl_bench.strategies.blocks.luca import SELECTION
from tests.helpers.cli import invoke

VIT = ("vit_base_patch16_224", "vit_base_patch16_224.augreg_in21k")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# a record of the code installed now (a made-up record names one file of it)
CURRENT_CODE = {"digest": "current", "modules": {label(RUNNER): file_digest(RUNNER)}}


def fake_run(
    out: Path,
    method: str = "tosca",
    scenario: str = "cifar100",
    seed: int = 1993,
    acc_seen: tuple[float, ...] = (90.0, 80.0, 70.0),
    selection: str | None = "sample",
    test_shuffle: bool = True,
    backbone: tuple[str, str] = VIT,
    epochs: int = 20,
    added: int = 1000,
    gflops: float = 17.6,
    protocol: str | None = None,
    schema: int = results.SCHEMA_VERSION,
) -> dict:
    """Write a schema-complete result record (as `cl-bench run` does; with ``schema=1``,
    as cl-bench did before protocol settings were declared) and return it."""
    tasks = [[2 * t, 2 * t + 1] for t in range(len(acc_seen))]
    acc_matrix = [[acc_seen[i] + j for j in range(i + 1)] for i in range(len(acc_seen))]
    params = {"epochs": epochs, "eval_batch_size": 48}
    declared = (EVAL_BATCH_SIZE,)
    if selection is not None:
        params["selection"] = selection
        declared = (SELECTION, EVAL_BATCH_SIZE)
    config = {
        "method": {"name": method, **params},
        "scenario": {"name": scenario, "init_cls": 2, "increment": 2, "test_shuffle": test_shuffle},
        "backbone": {
            "name": backbone[0],
            "weights": backbone[1],
            "weights_digest": backbone[1][:8],
        },
        **({"protocol": protocol} if protocol not in (None, "fair") else {}),
    }
    record = {
        "schema_version": schema,
        "method": method,
        "scenario": scenario,
        "seed": seed,
        "status": "done",
        "config": config,
        "class_order": list(range(2 * len(tasks))),
        "tasks": tasks,
        "protocol": protocol_block(protocol or "fair", declared, params, test_shuffle)
        if schema == 2
        else {
            "selection": selection,
            "batchwise": None,
            "test_shuffle": test_shuffle,
            "eval_batch_size": 48,
            **({"name": protocol} if protocol else {}),
        },
        "env": {},
        "acc_matrix": acc_matrix,
        "acc_seen": list(acc_seen),
        **summarize(acc_matrix, list(acc_seen)),
        "routing_acc": None,
        "accounting": {
            "added_per_task": [added + 1] + [added] * (len(tasks) - 1),
            "stored_at_end": added * len(tasks) + 1,
            "inference_gflops_per_image": gflops,
        },
        "timing": {
            "features_s": 0.0,
            "train_s": [1.0] * len(tasks),
            "eval_s": [0.1] * len(tasks),
            "total_s": 4.0,
        },
        "memory": {},
        "created": "2026-01-01T00:00:00+0000",
        "code": CURRENT_CODE,
    }
    results.write_atomic(results.run_path(out, scenario, method, seed, config), record)
    return record


SAMPLE_ACC = {1993: (90.0, 80.0, 70.0), 1994: (92.0, 84.0, 73.0), 1995: (88.0, 79.0, 64.0)}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """TOSCA with sample and with batch selection + ordered test, and SimpleCIL, on
    cifar100 (which both cards have published numbers for)."""
    out = tmp_path_factory.mktemp("results")
    for seed, acc in SAMPLE_ACC.items():
        fake_run(out, seed=seed, acc_seen=acc)
        fake_run(
            out,
            method="simplecil",
            seed=seed,
            selection=None,
            added=20,
            gflops=17.5,
            acc_seen=(95.0, 85.0, 80.0),
        )
    for seed in (1993, 1994):
        fake_run(out, seed=seed, selection="batch", test_shuffle=False, acc_seen=(99.0, 98.0, 97.0))
    return out


@pytest.fixture(scope="module")
def report_dir(store, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    result = invoke("report", "--results", str(store), "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def test_aggregation_mean_std_count(store):
    runs, skipped = load_runs(store)
    table = aggregate(runs).set_index("label")
    assert skipped == [] and len(runs) == 8
    row = table.loc["tosca (selection=sample)"]
    avg = [sum(a) / len(a) for a in SAMPLE_ACC.values()]
    last = [a[-1] for a in SAMPLE_ACC.values()]
    assert row["n"] == 3
    assert row["avg_acc_mean"] == pytest.approx(statistics.mean(avg))
    assert row["avg_acc_std"] == pytest.approx(statistics.stdev(avg))  # ddof=1
    assert row["last_acc_mean"] == pytest.approx(statistics.mean(last))
    assert row["last_acc_std"] == pytest.approx(statistics.stdev(last))
    assert row["added_params_mean"] == 1000 and row["stored_params_mean"] == 3001
    assert row["train_s_mean"] == pytest.approx(3.0)
    batch = table.loc["tosca (selection=batch, ordered test, batches of 48)"]
    assert batch["n"] == 2 and batch["last_acc_mean"] == 97.0 and batch["last_acc_std"] == 0


def test_protocols_backbones_and_settings_are_never_averaged(tmp_path):
    for seed in (1, 2):
        fake_run(tmp_path, seed=seed, acc_seen=(50.0,))
        fake_run(tmp_path, seed=seed, acc_seen=(60.0,), selection="batch")
        fake_run(tmp_path, seed=seed, acc_seen=(70.0,), test_shuffle=False)
        fake_run(tmp_path, seed=seed, acc_seen=(80.0,), backbone=("vit_base_patch16_224", "random"))
        fake_run(tmp_path, seed=seed, acc_seen=(90.0,), epochs=3)
    table = aggregate(load_runs(tmp_path)[0])
    assert len(table) == 5 and (table["n"] == 2).all() and (table["avg_acc_std"] == 0).all()
    means = dict(zip(table["label"], table["avg_acc_mean"], strict=True))
    assert means == {
        "tosca (selection=sample, vit_base_patch16_224; epochs=20)": 50.0,
        "tosca (selection=batch, batches of 48, vit_base_patch16_224)": 60.0,
        "tosca (selection=sample, ordered test, vit_base_patch16_224)": 70.0,
        "tosca (selection=sample, vit_base_patch16_224 random)": 80.0,
        "tosca (selection=sample, vit_base_patch16_224; epochs=3)": 90.0,
    }


def test_published_numbers_beside_paper_rows_with_protocol(tmp_path):
    """Published numbers stand beside --protocol paper rows only (a record without a
    protocol name is a fair run); the fair row of the same method shows the gap."""
    for seed in (1993, 1994):
        fake_run(tmp_path, seed=seed)
        fake_run(tmp_path, seed=seed, selection="batch", test_shuffle=False, protocol="paper")
        fake_run(tmp_path, method="simplecil", seed=seed, selection=None, protocol="paper")
        fake_run(tmp_path, method="simplecil", seed=seed, selection=None, protocol="fair")
    g = grid(aggregate(load_runs(tmp_path)[0]))
    col = g.header.index("paper avg")
    assert g.header[col - 1] == "avg acc (%)" and g.header[col + 2] == "paper last"
    cells = {row[0][0]: [text for text, _ in row] for row in g.rows}
    assert sorted(cells) == [
        "simplecil",
        "simplecil [paper]",
        "tosca (selection=sample)",
        "tosca [paper] (selection=batch, ordered test, batches of 48)",
    ]
    assert cells["tosca [paper] (selection=batch, ordered test, batches of 48)"][col] == "96.50 [2]"
    assert cells["simplecil [paper]"][col : col + 3 : 2] == ["86.48 [1]", "81.28 [1]"]
    assert cells["tosca (selection=sample)"][col] == cells["simplecil"][col] == "–"
    assert g.notes[0].startswith("[1] published: simplecil: re-run by the TOSCA authors")
    assert "paper, batch selection" in g.notes[1]


def test_schema_1_results_report_as_schema_2(tmp_path):
    """Records of schema 1 (four fixed protocol keys) give the labels, numbers and CSV
    that the same runs recorded under schema 2 give."""
    tables, csvs = [], []
    for schema in (1, 2):
        out = tmp_path / str(schema)
        for seed in (1993, 1994):
            fake_run(out, seed=seed, schema=schema)
            fake_run(
                out,
                seed=seed,
                selection="batch",
                test_shuffle=False,
                protocol="paper",
                schema=schema,
            )
            fake_run(out, method="simplecil", seed=seed, selection=None, schema=schema)
        runs = load_runs(out)[0]
        tables.append(aggregate(runs, published_for=lambda m, s: None))
        csvs.append(to_csv(runs))
    assert tables[0].equals(tables[1]) and csvs[0] == csvs[1]
    assert sorted(tables[0]["label"]) == [
        "simplecil",
        "tosca (selection=sample)",
        "tosca [paper] (selection=batch, ordered test, batches of 48)",
    ]


def test_best_per_column_marked(store):
    g = grid(aggregate(load_runs(store)[0]))
    bold = {g.header[i]: row[0][0] for row in g.rows for i, (_, b) in enumerate(row) if b}
    assert bold["last acc (%)"] == "tosca (selection=batch, ordered test, batches of 48)"
    assert bold["added params/task"] == bold["GFLOPs/image"] == "simplecil"
    assert "paper avg" not in bold and "method" not in bold


def test_csv_is_long_one_row_per_run_and_metric(report_dir, store):
    csv = pd.read_csv(report_dir / "runs.csv")
    assert len(csv) == 8 * (len(METRICS) + 3)  # and acc_task_1..3
    assert not csv.duplicated(["file", "metric"]).any()
    assert csv["file"].str.startswith("runs/cifar100/").all()  # relative: no local folder
    one = csv[
        (csv["seed"] == 1994)
        & (csv["metric"] == "avg_acc")
        & (csv["label"] == "tosca (selection=sample)")
    ]
    assert one["value"].item() == pytest.approx(sum(SAMPLE_ACC[1994]) / 3)


def test_latex_has_booktabs_rules_in_order(report_dir):
    lines = (report_dir / "report.tex").read_text().splitlines()
    rules = [
        line.strip() for line in lines if line.strip() in (r"\toprule", r"\midrule", r"\bottomrule")
    ]
    assert rules == [r"\toprule", r"\midrule", r"\bottomrule"]
    body = "\n".join(lines)
    assert r"\textbf{" in body and r"$\pm$" in body and "selection=batch" in body
    assert escape("vit_b 50% ± {x}") == r"vit\_b 50\% $\pm$ \{x\}"


def test_markdown_table_and_links(report_dir):
    md = (report_dir / "report.md").read_text()
    assert "| tosca (selection=sample) | n=3 |" in md
    legend = md.split("## Protocols and columns")[1].splitlines()
    assert [line.split("**")[1] for line in legend if line.startswith("- ")] == [
        "[paper]",
        "eval_batch_size",
        "selection",
        "ordered test",
        "columns",
        "ranks across scenarios",
    ]
    assert f"- **selection**: {SELECTION.meaning}." in legend
    assert "**97.00 ± 0.00**" in md
    for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md):
        assert (report_dir / link).is_file()


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables, self.images, self.external = 0, [], []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        self.tables += tag == "table"
        if tag == "img":
            self.images.append(a.get("src", ""))
        for key in ("src", "href"):
            if a.get(key) and not a[key].startswith("data:"):
                self.external.append(a[key])


def test_html_is_self_contained_with_every_image(report_dir):
    page = _Page()
    page.feed((report_dir / "report.html").read_text())
    assert page.tables == 1 and page.external == []
    # curve, cost, forgetting, three accuracy matrices, protocol sensitivity
    assert len(page.images) == 7
    for src in page.images:
        head, data = src.split(",", 1)
        assert head == "data:image/png;base64"
        png = base64.b64decode(data)
        assert png.startswith(PNG_MAGIC) and Image.open(io.BytesIO(png)).size == PIXELS


def test_plot_files_are_images_of_the_fixed_size(report_dir):
    stems = sorted(p.stem for p in report_dir.glob("*.png"))
    assert stems == sorted(p.stem for p in report_dir.glob("*.svg"))
    assert {"curve_cifar100", "cost_cifar100", "protocol_cifar100"} <= set(stems)
    assert len([s for s in stems if s.startswith("matrix_cifar100_")]) == 3
    for stem in stems:
        with Image.open(report_dir / f"{stem}.png") as im:
            assert im.format == "PNG" and im.size == PIXELS
        svg = (report_dir / f"{stem}.svg").read_text()
        assert svg.startswith("<?xml") and "<svg" in svg and len(svg) > 1000
    assert not list(report_dir.glob(".*.tmp"))


def test_bad_input_is_a_user_error(tmp_path, store):
    empty = invoke("report", "--results", str(tmp_path), "--out", str(tmp_path / "r"))
    assert empty.exit_code == 2 and "No finished runs" in empty.stderr
    wrong = invoke(
        "report", "--results", str(store), "--scenarios", "cifar10", "--out", str(tmp_path / "r")
    )
    assert wrong.exit_code == 2 and 'Did you mean "cifar100"' in wrong.stderr
    fmt = invoke("report", "--results", str(store), "--format", "pdf", "--out", str(tmp_path / "r"))
    assert fmt.exit_code == 2 and "Unknown report format" in fmt.stderr
    assert not (tmp_path / "r").exists()


def test_filters_and_skipped_files(tmp_path, store):
    shutil.copytree(store, tmp_path / "res")
    (tmp_path / "res/runs/cifar100/tosca/torn.json").write_text('{"status": "do')
    out = tmp_path / "r"
    result = invoke(
        "report",
        "--results",
        str(tmp_path / "res"),
        "--out",
        str(out),
        "--methods",
        "simplecil",
        "--format",
        "csv",
        "--images",
        "none",
    )
    assert result.exit_code == 0, result.output
    torn = tmp_path / "res/runs/cifar100/tosca/torn.json"
    assert result.stderr.startswith(f"warning: skipped {torn}: not valid JSON (")
    assert len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == ["paired.csv", "runs.csv"]
    assert set(pd.read_csv(out / "runs.csv")["method"]) == {"simplecil"}


CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="needs the Debian packages chromium and chromium-driver (installed by .ci/run)",
)
def test_html_renders_in_headless_chromium(report_dir, tmp_path):
    from selenium import webdriver  # dev extra

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(DRIVER))
    try:
        driver.get((report_dir / "report.html").resolve().as_uri())
        images = driver.execute_script(
            "return Array.from(document.images, i => [i.complete, i.naturalWidth]);"
        )
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        driver.quit()
    assert severe == []
    assert len(images) == 7 and all(done and width == PIXELS[0] for done, width in images)


def test_a_stale_result_is_refused_unless_allowed_and_then_marked(tmp_path):
    out = tmp_path / "res"
    fake_run(out, seed=1993)
    stale = fake_run(out, seed=1994)
    path = results.run_path(out, "cifar100", "tosca", 1994, stale["config"])
    results.write_atomic(
        path, {**stale, "code": {"digest": "old", "modules": {label(RUNNER): "0" * 16}}}
    )
    with pytest.raises(
        UserError,
        match=r"1 result\(s\) in .* are stale: .* cifar100/tosca "
        r"seed 1994: code changed: cl_bench/engine/runner.py "
        r"\(edited\)\. Run the same `cl-bench run` command",
    ):
        load_runs(out)
    runs, _ = load_runs(out, allow_stale=True)
    assert dict(zip(runs["seed"], runs["label"], strict=True)) == {
        1993: "tosca (selection=sample)",
        1994: "tosca (selection=sample) [stale]",
    }
    assert list(runs["stale"]) == ["", "code changed: cl_bench/engine/runner.py (edited)"]


def test_pdf_figure_size_dpi_and_paper_latex(store, tmp_path):
    out = tmp_path / "r"
    result = invoke(
        "report",
        "--results",
        str(store),
        "--out",
        str(out),
        "--format",
        "tex",
        "--images",
        "png,pdf",
        "--figure-size",
        "6.4x4",
        "--dpi",
        "50",
    )
    assert result.exit_code == 0, result.output
    for png in out.glob("*.png"):
        if not png.name.startswith("critical-difference"):
            with Image.open(png) as im:
                assert im.size == (320, 200)
        assert (out / f"{png.stem}.pdf").read_bytes().startswith(b"%PDF")
    tex = (out / "report.tex").read_text()
    assert r"\label{tab:cifar100}" in tex
    assert (
        r"\caption{cifar100: mean $\pm$ std over seeds; "
        r"bold: significantly best ($p<0.05$). Backbone: " in tex
    )
    assert "TOSCA (selection=sample) & n=3" in tex and "SimpleCIL & n=3" in tex
    bad = invoke("report", "--results", str(store), "--figure-size", "6x", "--out", str(out))
    assert bad.exit_code == 2 and "--figure-size 6.4x4" in bad.stderr
