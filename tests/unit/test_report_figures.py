"""The report's figures and paper tables on a fixed, hand-made runs frame: accuracy axes
bounded to 0-100, methods that add no parameters on their own band of the log axis,
legends and titles inside the saved figure, PDF bytes, figure size and dpi, LaTeX with
method titles, labels and captions naming the backbone, per-task accuracy in the CSV,
and the settings every row shares."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from cl_bench.errors import UserError
from cl_bench.reporting import captions, latex, plots
from cl_bench.reporting.report import METRICS, aggregate, grid, to_csv

TITLES = {"tosca": "TOSCA", "coda-prompt": "CODA-Prompt", "joint": "Joint"}
DEFAULTS = {
    ("method", "tosca"): {"epochs": 20, "lr": 0.025},
    ("method", "joint"): {"epochs": 20},
    ("scenario", "toy"): {"increment": 2},
}


def defaults(kind: str, name: str) -> dict | None:
    return DEFAULTS.get((kind, name))


def run(method: str, seed: int, matrix: list[list[float]], **over) -> dict:
    """One row of the runs frame, as Result.row gives it (3 tasks of 2 classes)."""
    acc_seen = [float(np.mean(r)) for r in matrix]
    row = {
        "scenario": "toy",
        "method": method,
        "seed": seed,
        "config": f"{method}-cfg",
        "protocol": "fair",
        "backbone": "vit_tiny_patch16_224",
        "weights": "pretrained",
        "device": "cpu",
        "protocol_label": "",
        "protocol_settings": "",
        "protocol_meanings": {},
        "test_shuffle": True,
        "avg_acc": float(np.mean(acc_seen)),
        "last_acc": acc_seen[-1],
        "forgetting": 1.0,
        "added_params": 0 if method == "joint" else 1000,
        "stored_params": 5,
        "gflops": 1.5,
        "train_s": 2.0,
        "total_s": 3.0,
        "peak_rss_gib": 1.25,
        "gpu_peak_gib": float("nan"),
        "acc_seen": acc_seen,
        "acc_matrix": matrix,
        "seen_classes": [2, 4, 6],
        "flat_config": {"method.name": method, "method.epochs": 3, "scenario.increment": 2},
        "packages": {},
        "stale": "",
        "config_file": "",
        "file": f"runs/toy/{method}/{seed}.json",
        "label": method,
    }
    return row | over


MATRICES = {
    ("tosca", 1): [[90.0], [80.0, 70.0], [60.0, 50.0, 40.0]],
    ("tosca", 2): [[92.0], [82.0, 72.0], [62.0, 52.0, 42.0]],
    ("joint", 1): [[99.0], [98.0, 97.0], [96.0, 95.0, 100.0]],
    ("joint", 2): [[99.0], [98.0, 97.0], [96.0, 95.0, 100.0]],
}


@pytest.fixture(autouse=True)
def titles(monkeypatch):
    monkeypatch.setattr(captions, "method_title", lambda m: TITLES.get(m, m))
    monkeypatch.setattr(
        plots, "titled", lambda label, m: captions.titled(label, m, lambda n: TITLES.get(n, n))
    )


def frame(rows: list[dict] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs = pd.DataFrame(rows or [run(m, s, a) for (m, s), a in MATRICES.items()])
    return runs, aggregate(runs, published_for=lambda m, s: None)


def context(runs: pd.DataFrame) -> captions.Context:
    return captions.context(runs, defaults)


def many(n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``n`` configurations with long labels, as a report of every method has."""
    rows = [
        run(
            f"method-{i}",
            1,
            MATRICES[("tosca", 1)],
            config=f"c{i}",
            label=f"method-{i} (selection=sample, ordered test, batches of 48)",
        )
        for i in range(n)
    ]
    return frame(rows)


def inside(artist, fig) -> bool:
    box, page = artist.get_window_extent(), fig.bbox
    return (
        box.x0 >= page.x0 - 1
        and box.y0 >= page.y0 - 1
        and box.x1 <= page.x1 + 1
        and box.y1 <= page.y1 + 1
    )


def test_curve_accuracy_axis_runs_from_0_to_100():
    runs, table = frame()
    plot = plots.curve(context(runs), runs, table)
    (ax,) = plot.figure.axes
    assert ax.get_ylim() == (0.0, 100.0)
    assert [line.get_label() for line in ax.get_lines()] == ["Joint (n=2)", "TOSCA (n=2)"]


def test_cost_accuracy_axis_stays_within_0_and_100():
    assert plots.accuracy_limits(96.0, 100.0) == (94.0, 100.0)
    assert plots.accuracy_limits(1.0, 50.0) == (0.0, 50.0 + 0.08 * 49.0)
    runs, table = frame()
    for ax in plots.cost(context(runs), table).figure.axes:
        low, high = ax.get_ylim()
        assert 0 <= low and high <= 100


def test_a_cost_marker_at_100_percent_is_drawn_whole():
    full = [[100.0], [100.0, 100.0], [100.0, 100.0, 100.0]]
    runs, table = frame([run("joint", 1, full), run("tosca", 1, MATRICES[("tosca", 1)])])
    fig = plots.cost(context(runs), table).figure
    fig.canvas.draw()
    for ax in fig.axes:
        assert ax.get_ylim()[1] == 100.0
        top = ax.get_window_extent().y1
        rings = [c for c in ax.collections if c.get_label() == "Pareto front"]
        markers = [line for line in ax.get_lines() if line.get_marker() not in ("None", "")]
        assert rings and markers
        assert not any(a.get_clip_on() for a in [*rings, *markers])
        [ring] = rings
        x, y = ax.transData.transform(ring.get_offsets()[np.argmax(ring.get_offsets()[:, 1])])
        radius = np.sqrt(ring.get_sizes()[0]) / 2 * fig.dpi / 72
        assert y + radius > top  # the ring around the 100 % point reaches above the axes
        assert y + radius < fig._suptitle.get_window_extent().y0  # below the title


@pytest.mark.parametrize("size", [None, "4x5"])
def test_the_matrix_and_its_colour_bar_sit_together_in_the_middle(size):
    runs, table = frame()
    fig = plots.matrix(context(runs), next(table.itertuples()), runs, plots.look(size)).figure
    fig.canvas.draw()
    ax = next(a for a in fig.axes if a.get_ylabel() == "after training task")
    [bar] = ax.child_axes
    cells, scale, page = ax.get_window_extent(), bar.get_window_extent(), fig.bbox
    assert 0 < scale.x0 - cells.x1 < 0.1 * cells.width  # beside the matrix, not at the edge
    assert scale.y0 == pytest.approx(cells.y0) and scale.y1 == pytest.approx(cells.y1)
    left, right = cells.x0 - page.x0, page.x1 - scale.x1
    assert abs(left - right) < 0.25 * page.width  # no empty half on one side
    assert inside(bar, fig)


def test_methods_that_add_nothing_sit_on_a_band_left_of_the_log_range():
    fig, (ax,) = plots._figure(plots.LOOK)
    pos = plots.log_positions(ax, np.array([0.0, 1000.0, 0.0, 5000.0]))
    assert ax.get_xscale() == "log"
    assert pos[1] == 1000.0 and pos[3] == 5000.0
    assert pos[0] == pytest.approx(100 / 1.3**0.5) and pos[2] == pytest.approx(100 * 1.3**0.5)
    assert ax.get_xlim() == pytest.approx((50.0, 10000.0))
    ticks = ax.get_xticks()
    assert ticks[0] == 100.0 and ax.xaxis.get_major_formatter()(100.0, 0) == "0"
    assert all(t >= 300 for t in ticks[1:])
    assert ax.xaxis.get_major_formatter()(1000.0, 1) == "1k"


def test_no_zero_band_without_a_zero():
    fig, (ax,) = plots._figure(plots.LOOK)
    pos = plots.log_positions(ax, np.array([0.768, 0.772]))
    assert list(pos) == [0.768, 0.772] and ax.get_xlim() == pytest.approx((0.384, 1.544))
    assert not ax.patches  # no shaded band


@pytest.mark.parametrize("n", [2, 7, 14])
def test_legends_and_titles_lie_inside_the_saved_figure(n):
    runs, table = many(n)
    ctx = context(runs)
    for plot in (
        plots.curve(ctx, runs, table),
        plots.cost(ctx, table),
        plots.forgetting(ctx, runs, table),
        plots.matrix(ctx, next(table.itertuples()), runs),
    ):
        fig = plot.figure
        fig.canvas.draw()
        for legend in fig.legends:
            assert inside(legend, fig), plot.name
            for ax in fig.axes:  # outside the axes: no line is hidden under it
                assert not legend.get_window_extent().overlaps(ax.get_window_extent())
        assert inside(fig._suptitle, fig), plot.name


def test_pdf_and_size_and_dpi():
    runs, table = frame()
    look = plots.look("6.4x4", 200)
    assert look == plots.Look((6.4, 4.0), 200) and look.pixels == (1280, 800)
    fig = plots.curve(context(runs), runs, table, look).figure
    png = plots.render(fig, "png")
    with Image.open(io.BytesIO(png)) as im:
        assert im.size == (1280, 800)
    pdf = plots.render(fig, "pdf")
    assert pdf.startswith(b"%PDF") and pdf == plots.render(fig, "pdf")  # no date inside
    assert plots.look((5, 3)).size == (5.0, 3.0) and plots.look().pixels == plots.PIXELS


@pytest.mark.parametrize(
    ("size", "dpi"), [("6.4by4", None), ("0.5x4", None), ((6.4,), None), (None, 0), (None, 2.5)]
)
def test_bad_size_or_dpi_is_a_user_error(size, dpi):
    with pytest.raises(UserError, match=r"e\.g\. --(figure-size 6\.4x4|dpi 200)"):
        plots.look(size, dpi)


def test_forgetting_and_backward_transfer_per_task():
    m = np.array([[90.0, np.nan, np.nan], [80.0, 70.0, np.nan], [60.0, 50.0, 40.0]])
    assert list(plots.forgetting_per_task(m)) == [30.0, 20.0]
    assert plots.backward_transfer(m) == -25.0  # ((60 - 90) + (50 - 70)) / 2
    runs, table = frame([run("tosca", 1, [[90.0]])])
    assert plots.forgetting(context(runs), runs, table) is None  # one task: nothing forgot


def test_csv_has_the_accuracy_on_each_task_after_the_last():
    runs, _ = frame()
    csv = pd.read_csv(io.StringIO(to_csv(runs)))
    tasks = csv[csv["metric"].str.startswith("acc_task_")]
    got = {(r.method, r.seed, r.metric): r.value for r in tasks.itertuples()}
    assert got == {
        (m, s, f"acc_task_{j}"): v for (m, s), a in MATRICES.items() for j, v in enumerate(a[-1], 1)
    }
    assert len(csv) == 4 * (len(METRICS) + 3)
    tosca = csv[(csv["method"] == "tosca") & (csv["seed"] == 1)]["metric"].tolist()
    assert tosca[-3:] == ["acc_task_1", "acc_task_2", "acc_task_3"] or "acc_task_1" in tosca


def test_captions_name_the_backbone_flag_random_weights_and_shared_settings():
    runs, _ = frame()
    ctx = context(runs)
    assert ctx.backbone == "backbone: vit_tiny_patch16_224, pretrained weights"
    assert ctx.shared == ["epochs=3"]  # increment=2 is the scenario card's default
    assert ctx.sentence == (
        "Backbone: vit_tiny_patch16_224, pretrained weights; settings of every row other "
        "than the card defaults: epochs=3."
    )
    random = context(pd.DataFrame([run("tosca", 1, [[50.0]], weights="random")]))
    assert random.random and random.backbone == (
        "backbone: vit_tiny_patch16_224, RANDOM WEIGHTS, not pretrained"
    )
    assert random.figure_title == "toy (vit_tiny_patch16_224, RANDOM WEIGHTS, not pretrained)"


def test_shared_settings_where_only_some_methods_have_the_setting():
    rows = [
        run("tosca", 1, [[50.0]], flat_config={"method.epochs": 3, "scenario.increment": 5}),
        run("joint", 1, [[50.0]], flat_config={"method.epochs": 3, "scenario.increment": 5}),
        run("simplecil", 1, [[50.0]], flat_config={"scenario.increment": 5}),
    ]
    assert captions.shared_settings(pd.DataFrame(rows), defaults) == [
        "epochs=3 (where set)",
        "scenario.increment=5",
    ]
    same = [run("tosca", 1, [[50.0]], flat_config={"method.epochs": 20})]
    assert captions.shared_settings(pd.DataFrame(same), defaults) == []


def test_latex_has_titles_label_and_a_caption_with_backbone_and_random_flag():
    runs, table = frame()
    runs["weights"] = "random"
    g = grid(table)
    ctx = context(runs)
    tex = latex.to_latex({"toy": g}, {"toy": ctx}, {"toy": list(table["method"])})
    rows = [line for line in tex.splitlines() if line.endswith(r"\\")][1:]
    assert [r.split(" & ")[0].removeprefix(r"\textbf{").rstrip("}") for r in rows] == [
        "Joint",
        "TOSCA",
    ]
    assert r"\label{tab:toy}" in tex
    assert (
        r"\caption{toy: mean $\pm$ std over seeds; bold: significantly best ($p<0.05$). Backbone: "
        r"vit\_tiny\_patch16\_224, \textbf{RANDOM WEIGHTS}, not pretrained. Settings of "
        r"every row other than the card defaults: epochs=3.}"
    ) in tex
    assert latex.label_key("cifar100 / 10 tasks") == "tab:cifar100-10-tasks"


def test_table_leaves_out_a_memory_column_no_row_has():
    _, table = frame()
    header = grid(table).header
    assert "peak RSS GiB" in header and "total s" in header and "GPU peak GiB" not in header
