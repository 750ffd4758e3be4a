"""Trackers at work: one SimpleCIL run on `synthetic` sends its per-task metrics, final
numbers and configuration to CSV, TensorBoard, W&B (offline) and MLflow (a local file
store) and to an Avalanche logger of the caller's own; each is read back and matches the
result file, whose identity is that of a run without trackers."""

from __future__ import annotations

from pathlib import Path

import pytest

import cl_bench
from cl_bench.errors import UserError
from tests.helpers.cli import invoke
from tests.helpers.wandb_records import history_and_config

RUN = dict(scenario="synthetic", seeds=[1993], precision="fp32", progress=False, echo=None)


class Collected:
    """An Avalanche-style logger: what ``log_single_metric`` was given."""

    def __init__(self) -> None:
        self.values: list[tuple[str, float, int]] = []

    def log_single_metric(self, name, value, x_plot):
        self.values.append((name, value, x_plot))


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    out = tmp_path_factory.mktemp("tracked")
    mine = Collected()
    [result] = cl_bench.run(
        ["simplecil"], out=out, log="csv,tensorboard,wandb,mlflow", loggers=[mine], **RUN
    )
    logs = out / "logs" / "synthetic" / "simplecil" / result.path.stem
    return result, logs, mine


def per_task(result, name: str) -> list[float]:
    tasks = len(result.acc_seen)
    if name == "acc_seen":
        return list(result.acc_seen)
    return [sum(result.acc_seen[: k + 1]) / (k + 1) for k in range(tasks)]


def test_the_result_is_that_of_a_run_without_trackers(tracked, tmp_path):
    result, logs, _ = tracked
    [plain] = cl_bench.run(["simplecil"], out=tmp_path, **RUN)
    assert plain.path.name == result.path.name and plain.acc_matrix == result.acc_matrix
    assert not (tmp_path / "logs").exists()
    assert sorted(p.name for p in logs.iterdir()) == ["csv", "mlflow", "tensorboard", "wandb"]


def test_csv_and_own_logger_receive_every_task(tracked):
    result, logs, mine = tracked
    rows = (logs / "csv" / "metrics.csv").read_text().splitlines()
    seen = [float(r.split(",")[2]) for r in rows if ",acc_seen," in r]
    assert seen == result.acc_seen
    last = {r.split(",")[1]: float(r.split(",")[2]) for r in rows[1:]}
    assert last["final/avg_acc"] == pytest.approx(result.avg_acc, abs=1e-12)
    assert [(v, s) for n, v, s in mine.values if n == "acc_seen"] == [
        (a, k + 1) for k, a in enumerate(result.acc_seen)
    ]
    assert ("final/last_acc", result.last_acc, len(result.acc_seen)) in mine.values


def test_tensorboard_event_file_holds_the_scalars_and_the_config(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result, logs, _ = tracked
    events = EventAccumulator(str(logs / "tensorboard"))
    events.Reload()
    for name in ("acc_seen", "avg_acc"):
        scalars = events.Scalars(name)
        assert [s.step for s in scalars] == list(range(1, len(result.acc_seen) + 1))
        assert [s.value for s in scalars] == pytest.approx(per_task(result, name), abs=1e-4)
    [final] = events.Scalars("final/last_acc")
    assert final.value == pytest.approx(result.last_acc, abs=1e-4)
    assert "config/text_summary" in events.Tags()["tensors"]


def test_wandb_offline_run_holds_history_and_config(tracked):
    result, logs, _ = tracked
    [run_file] = (logs / "wandb").glob("wandb/offline-run-*/run-*.wandb")
    history, config = history_and_config(run_file)
    steps = {h["_step"]: h for h in history}
    assert sorted(steps) == list(range(1, len(result.acc_seen) + 1))
    assert [steps[k + 1]["acc_seen"] for k in range(len(result.acc_seen))] == result.acc_seen
    assert steps[len(result.acc_seen)]["final/avg_acc"] == pytest.approx(result.avg_acc)
    assert config["method.name"] == "simplecil" and config["scenario.name"] == "synthetic"


def test_mlflow_file_store_holds_metrics_and_params(tracked):
    import mlflow

    result, logs, _ = tracked
    client = mlflow.MlflowClient(tracking_uri=(logs / "mlflow").resolve().as_uri())
    [run] = client.search_runs([client.get_experiment_by_name("cl-bench").experiment_id])
    history = client.get_metric_history(run.info.run_id, "acc_seen")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
        (k + 1, a) for k, a in enumerate(result.acc_seen)
    ]
    assert run.data.metrics["final_last_acc"] == pytest.approx(result.last_acc)
    assert run.data.params["method.name"] == "simplecil"
    assert run.info.run_name == f"synthetic/simplecil/{result.path.stem}"


def test_bad_tracker_names_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(UserError, match='Unknown --log tracker "tensorbord"'):
        cl_bench.run(["simplecil"], out=tmp_path / "out", log=["tensorbord"], **RUN)
    refused = invoke("run", "--scenario", "synthetic", "--out", str(tmp_path / "o"), "--log", "x")
    assert refused.exit_code == 2 and 'Unknown --log tracker "x"' in refused.stderr
    assert not (tmp_path / "out").exists() and not Path(tmp_path / "o").exists()
