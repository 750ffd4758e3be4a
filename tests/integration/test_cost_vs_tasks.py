"""bench figure cost-vs-tasks (bench/cost_vs_tasks.py): a probed run records per task what
the method keeps and what one test image costs; a run past its budget stops after the
task it is on and says so; a refused setting is recorded with its message; the record
follows the measurement schema and the Performance page draws it."""

from __future__ import annotations

import json

import pytest

from bench import cost_vs_tasks, cost_vs_tasks_plot, measurements
from docs_build import performance

D = 192  # ViT-Tiny's width


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    """SimpleCIL over 3 tasks, L2P over 2, TOSCA over 4 with no time (stops after its
    first task), CODA-Prompt at 200 tasks (more than its 100 pool components)."""
    return {
        "simplecil": cost_vs_tasks.one("simplecil", 3, 1e9),
        "l2p": cost_vs_tasks.one("l2p", 2, 1e9),
        "tosca": cost_vs_tasks.one("tosca", 4, 0.0),
        "coda-prompt": cost_vs_tasks.one("coda-prompt", 200, 1e9),
    }


def test_each_task_records_what_is_kept_and_what_an_image_costs(runs):
    r = runs["simplecil"]
    assert r["status"] == "done" and r["stopped_at_task"] is None
    rows = r["per_task"]
    assert set(rows) == set(cost_vs_tasks.PER_TASK)
    assert all(len(v) == 3 for v in rows.values())
    assert rows["stored_params"] == [1 + D, 1 + 2 * D, 1 + 3 * D]  # a prototype per class
    assert rows["passes_per_image"] == [1, 1, 1]
    assert rows["gflops_per_image"][0] > 0.05  # a ViT-Tiny pass at 32 px: 0.054 GFLOPs
    assert rows["checkpoint_bytes"][:2] == sorted(rows["checkpoint_bytes"][:2])
    assert rows["checkpoint_bytes"][-1] is None  # nothing runs after the last task here
    assert all(p > 0 for p in [r["rss_start_bytes"], *rows["peak_rss_bytes"]])


def test_l2p_passes_each_image_twice(runs):
    """The query pass, then the pass with the prompts it selected."""
    assert runs["l2p"]["per_task"]["passes_per_image"] == [2, 2]


def test_budgets_are_per_stream_length():
    assert cost_vs_tasks.budgets("20", [10, 50]) == {10: 20.0, 50: 20.0}
    assert cost_vs_tasks.budgets("10:60,300:180", [10, 50, 300]) == {
        10: 60.0,
        50: cost_vs_tasks.BUDGET_S,
        300: 180.0,
    }


def test_a_run_past_its_budget_stops_after_its_task(runs):
    r = runs["tosca"]
    assert (r["status"], r["stopped_at_task"]) == ("stopped", 1)
    assert all(len(v) == 1 for v in r["per_task"].values())


def test_a_refused_setting_is_recorded_with_its_message(runs):
    r = runs["coda-prompt"]
    assert r["status"] == "refused"
    assert r["reason"] == (
        "coda-prompt: 200 tasks do not fit pool_size 100 (at least one component per "
        "task); raise coda-prompt.pool_size or use fewer tasks."
    )
    assert r["per_task"]["train_s"] == []


def made(runs: dict) -> dict:
    """A record of ``runs`` as bench.cost_vs_tasks.main makes it."""
    toy = {**cost_vs_tasks.TOY, "lengths": [2, 3, 4, 200]}
    return {"toy": {**toy, "methods": list(runs)}, "runs": list(runs.values())}


def test_the_record_follows_the_schema_and_the_page_draws_it(runs, tmp_path):
    out = made(runs)
    path = cost_vs_tasks.record(out, results=tmp_path)
    assert measurements.read(path, measurements.load_figures()).figure == "cost-vs-tasks"
    written = json.loads(path.read_text())
    assert dict(tuple(h.values()) for h in written["headline"])["simplecil"] == (
        "3 of 3 tasks; at task 3: "
        f"{runs['simplecil']['per_task']['train_s'][-1]:.2f} s training, 577 stored "
        "parameters, 1 backbone pass and "
        f"{runs['simplecil']['per_task']['gflops_per_image'][-1]:.3f} GFLOPs per test image"
    )
    headers, rows = cost_vs_tasks_plot.table(written)
    assert headers == ["method", "T = 2", "T = 3", "T = 4", "T = 200"]
    assert rows == [
        ["simplecil", "not run", "done", "not run", "not run"],
        ["l2p", "done", "not run", "not run", "not run"],
        ["tosca", "not run", "not run", "stopped at 1", "not run"],
        ["coda-prompt", "not run", "not run", "not run", "refused"],
    ]
    svg = cost_vs_tasks_plot.svg(written)
    assert svg == cost_vs_tasks_plot.svg(written)  # no date, fixed ids
    assert all(m in svg for m in ("simplecil", "l2p", "tosca"))
    files = performance.performance_page(tmp_path)
    assert files["cost-vs-tasks.svg"] == svg
    page = files["performance.md"]
    assert "](cost-vs-tasks.svg)" in page
    assert "| tosca | not run | not run | stopped at 1 | not run |" in page
    assert "coda-prompt at T = 200: refused: coda-prompt: 200 tasks" in page.replace("\\", "")
