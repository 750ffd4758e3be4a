"""The committed measurements (bench/results/*.json) follow bench.measurements' schema and
name a figure of bench/figures.yaml, every figure has at least one, and a bench's
``write`` records a file that reads back as it was made. The figures themselves are
measured, never asserted."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from bench import measurements
from bench import run as bench_run
from bench.measurements import MeasurementError, load_all, load_figures, read, write


def test_every_committed_measurement_follows_the_schema():
    committed = subprocess.run(
        ["git", "ls-files", "bench/results/*.json"],
        cwd=measurements.ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert committed, "no measurement is committed"
    found = {m.path.name: m for m in load_all()}
    for name in committed:
        assert name.split("/")[-1] in found
    for m in found.values():
        assert m.path.name.startswith(f"{m.figure}-{m.date}-"), m.path.name
        assert m.command, f"{m.path.name}: meta.command is empty"


def test_figures_are_named_after_what_they_measure():
    """Figure ids are kebab-case words, never letters; each figure bench.run makes is the
    ``main`` of the bench module of its name."""
    for figure in load_figures():
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", figure), figure
    for figure in bench_run.FIGURES:
        assert callable(getattr(bench_run.module_of(figure), "main", None)), figure


# figures that need hardware no machine of the project has had yet (a GPU: none lent so far)
AWAITING_HARDWARE = {"gpu-check"}


def test_every_figure_has_a_measurement():
    figures = load_figures()
    measured = {m.figure for m in load_all()}
    assert set(figures) - measured <= AWAITING_HARDWARE
    assert set(bench_run.FIGURES) <= set(figures)


def test_write_round_trips_into_a_folder(tmp_path):
    headline = [("ours vs theirs", "2.00x (1.0 s vs 2.0 s)")]
    data = {"ours_s": 1.0, "theirs_s": 2.0}
    path = write(
        "feature-cache",
        headline,
        data,
        "fp32",
        "python -m bench.run feature-cache",
        note="A test.",
        results=tmp_path,
    )
    assert path.parent == tmp_path
    m = read(path, load_figures())
    assert (m.figure, m.precision, m.command, m.note) == (
        "feature-cache",
        "fp32",
        "python -m bench.run feature-cache",
        "A test.",
    )
    assert m.headline == (("ours vs theirs", "2.00x (1.0 s vs 2.0 s)"),)
    assert m.path.name == f"feature-cache-{m.date}-{measurements.cpu_slug()}.json"
    assert m.cpu.endswith(" cores") and m.commit == measurements.head_commit()
    assert {
        k: v
        for k, v in json.loads(path.read_text()).items()
        if k not in ("figure", "meta", "headline")
    } == data
    again = write(
        "feature-cache",
        headline,
        data,
        "fp32",
        "python -m bench.run feature-cache",
        results=tmp_path,
    )
    assert again != path and again.name.endswith("-2.json")  # never replaces one
    assert {m.path.name for m in load_all(tmp_path)} == {path.name, again.name}


def test_write_refuses_what_does_not_follow_the_schema(tmp_path):
    with pytest.raises(MeasurementError, match="'figure' must be one of"):
        write("no-such-figure", [("x", "1")], {}, "fp32", "python x", results=tmp_path)
    with pytest.raises(MeasurementError, match="'headline' must be"):
        write("feature-cache", [], {}, "fp32", "python x", results=tmp_path)
    with pytest.raises(MeasurementError, match="may not use the keys"):
        write("feature-cache", [("x", "1")], {"meta": {}}, "fp32", "python x", results=tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_read_names_the_file_and_what_is_wrong(tmp_path):
    figures = load_figures()
    bad = tmp_path / "feature-cache-2026-01-01-x.json"
    bad.write_text("{not json")
    with pytest.raises(MeasurementError, match="feature-cache-2026-01-01-x.json: not JSON"):
        read(bad, figures)
    bad.write_text(json.dumps({"figure": ["feature-cache"]}))
    with pytest.raises(MeasurementError, match="'figure' must be one of"):
        read(bad, figures)
    bad.write_text(
        json.dumps(
            {
                "figure": "feature-cache",
                "headline": [{"label": "x", "value": "1"}],
                "meta": {"date": "2026-13-01", "cpu": "c", "precision": "p", "commit": "abcdef1"},
            }
        )
    )
    with pytest.raises(MeasurementError, match="is not YYYY-MM-DD"):
        read(bad, figures)


def test_command_line_names_the_kernel_variables_that_are_set(monkeypatch):
    for name in measurements.KERNEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    args = ["-m", "bench.run", "extraction-engines"]
    assert measurements.command_line(args) == "python -m bench.run extraction-engines"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("CL_BENCH_CPU_BF16", "0")
    assert measurements.command_line(args) == (
        "ONEDNN_MAX_CPU_ISA=AVX2 CL_BENCH_CPU_BF16=0 python -m bench.run extraction-engines"
    )


def test_bench_run_headlines_from_recorded_raw_results():
    """bench.run's headline rows come from each figure's raw result: checked on the raw
    data of committed measurements of l2p-against-avalanche, extraction-engines and
    prompts-against-pilot (the first two files keep their raw result under the figure's
    letter id of the time, "d" and "h")."""
    by_name = {m.path.name: m for m in load_all()}
    for name, key, kept_as in (
        ("l2p-against-avalanche-2026-12-06-xeon-amx-lean-tail.json", "l2p-against-avalanche", "d"),
        ("prompts-against-pilot-2026-12-06-xeon-amx-lean-tail.json", "prompts-against-pilot", "h"),
    ):
        raw = json.loads(by_name[name].path.read_text())[kept_as]
        rows = dict(bench_run.headline(key, raw))
        assert bench_run.precision_of(key, raw) == "fp32"
        if key == "l2p-against-avalanche":
            assert rows["ours, card defaults"] == "0.63x time, 0.75x memory (11.4 s, 2.21 GB)"
        else:
            assert rows["CODA-Prompt, ours, checkpoint_blocks: 12"] == (
                "0.59x time, 0.55x memory (10.3 s, 1.73 GB)"
            )
    raw = json.loads(by_name["extraction-engines-2026-12-06-xeon-amx.json"].path.read_text())
    rows = dict(bench_run.headline("extraction-engines", raw))
    assert rows["openvino 2026.4.1 bf16"].startswith("448.7 img/s (7.49x, 31 % of the bf16")
    assert bench_run.precision_of("extraction-engines", raw) == "fp32, bf16"
    args = ["-m", "bench.run", "l2p-against-avalanche"]
    assert bench_run.record("l2p-against-avalanche", {"not_measured": "no peer"}, args) is None


def test_loader_headline_from_its_recorded_raw_result():
    from bench import loader_throughput

    m = next(m for m in load_all() if m.figure == "loader-throughput")
    rows = dict(loader_throughput.headline(json.loads(m.path.read_text())))
    assert rows["train (rrc224-scale0.05-flip), 2 workers"] == "309 img/s, 161 per CPU-second"
    assert rows["JPEG draft mode, 1000x750"].endswith("up to 33 of 255 levels")


def test_a_day_s_measurements_are_ordered_by_the_commit_measured(tmp_path):
    """Dates have a day's resolution: within one, the later commit is the newer
    measurement, whatever the file names say."""
    for name, commit in (
        ("extraction-engines-2026-12-06-z-earlier.json", "301e76a"),
        ("extraction-engines-2026-12-06-a-later.json", "451bbb9"),
        ("extraction-engines-2026-12-07-b.json", "301e76a"),
    ):
        date = name.removeprefix("extraction-engines-")[:10]
        (tmp_path / name).write_text(
            json.dumps(
                {
                    "figure": "extraction-engines",
                    "headline": [{"label": "x", "value": "1"}],
                    "meta": {"date": date, "cpu": "c", "precision": "fp32", "commit": commit},
                }
            )
        )
    assert [m.path.name for m in load_all(tmp_path)] == [
        "extraction-engines-2026-12-07-b.json",
        "extraction-engines-2026-12-06-a-later.json",
        "extraction-engines-2026-12-06-z-earlier.json",
    ]
